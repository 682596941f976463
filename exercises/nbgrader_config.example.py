# An nbgrader configuration for a class that uses this course's exercises.
# Copy it into your course folder as nbgrader_config.py and change the paths.
# Both nbgrader and `python -m transformer_course.grading.gradebook` read it (from the
# folder you run them in, as nbgrader does).
c = get_config()  # noqa: F821  (nbgrader defines get_config)

# The course folder: source/, release/, submitted/, autograded/, feedback/
c.CourseDirectory.root = "/srv/course"
# A short id, used by the exchange (release, collect, feedback)
c.CourseDirectory.course_id = "transformer-course"
# The gradebook: where scores, students and due dates are kept
c.CourseDirectory.db_url = "sqlite:////srv/course/gradebook.db"

# The exchange folder through which nbgrader releases assignments, collects
# submissions and hands back feedback (on a shared JupyterHub: readable and
# writable by everyone)
c.Exchange.root = "/srv/nbgrader/exchange"

# Late submissions. Due dates are set per assignment:
#   nbgrader db assignment add ch01 --duedate="2026-12-01 17:00 UTC"
# and a submission's time is its timestamp.txt (written by `nbgrader submit`,
# kept by `nbgrader collect`). "none" records the lateness only; "zero" takes
# every point of a late notebook. For another rule, write a plugin and name it:
#   c.AssignLatePenalties.plugin_class = "mycourse.HalfOffPerDay"
c.LateSubmissionPlugin.penalty_method = "zero"

# The stub nbgrader puts where a solution was: the course's checks recognise
# a stub that raises NotImplementedError and report "not attempted".
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}

# `nbgrader export` writes grades.csv as nbgrader does, and warns when points
# changed in the source notebook since the class was graded (scores on the old
# scale): grade the class again before exporting
c.ExportApp.plugin_class = "transformer_course.grading.gradebook.CheckedCsvExport"
