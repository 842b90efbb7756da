"""Hardware counters from a trusted replayer (``--counters replay``): the record of a student's
launches (``record``), the device code taken out of the student's library (``cubin``), the replay
planned on buffers of the grader's own (``plan``), the replayer program and its process
(``service``), the records a lab's correctness worker makes for it (``handoff``), and a lab's
counter cases measured through it (``collect``).
"""
