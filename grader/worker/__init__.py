"""The worker: the only process that loads student code (a package the sandbox copies whole).

It loads shared objects with ctypes and runs tasks sent by the grader (``protocol``). A
student's worker calls the launcher on buffers the trusted worker owns and shares (``owned``,
``shared``): it maps them and reports nothing of them; the trusted worker reads what the call
left there and hands back outputs as .npy files. It never sees expected results. Two modes
(``python -I -c BOOTSTRAP ROOT`` then, as ``main.main`` takes them):

* ``--serve`` reads one JSON task per line from the file descriptor in ``GRADER_TASK_FD`` and
  writes one JSON reply per line to the one in ``GRADER_RESULT_FD`` (student output goes to
  stdout);
* ``--job JOB.json --result RESULT.json`` runs one task (under ncu or compute-sanitizer).

Before any student code is loaded it confines itself (``confine``). Nothing here imports the rest
of the grader: this package, the standard library, numpy and CuPy are all it needs.
"""
