"""Rendering lab reports: JUnit XML, Markdown, JSON and the terminal summary."""
