"""An instructor's tools: validating the labs against their known solutions, writing the student and course bundles, and the labs' README files."""
