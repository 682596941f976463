"""Grading a class: untrusted submissions, judged outside their own process.

* :mod:`.grade` (``python -m transformer_course.grading.grade NOTEBOOK``): one
  submitted exercise notebook, graded with the course's checks.
* :mod:`.sandbox`: where submitted code runs (bubblewrap; the fork server is
  ``transformer_course/exercises/runner.py``, which the sandbox runs as a script).
* :mod:`.gradebook` (``python -m transformer_course.grading.gradebook ASSIGNMENT``):
  a class, through nbgrader's gradebook, due dates, feedback and export.

The checks themselves live in :mod:`transformer_course.exercises`; nothing here
is imported by ``import transformer_course``.
"""
