"""nbgrader in the instructor's server on the class hub (hub/jupyterhub_config.py puts this
folder, after jupyter/staff, on the instructor's JUPYTER_CONFIG_PATH).

The course's own settings (the repository's nbgrader_config.py: sandboxed grading, feedback
without hidden tests, the CSV export), with the course folder moved to the instructor's home
(~/key-vectors: gradebook.db, release/, submitted/, autograded/, feedback/ are the
instructor's, in a home no learner can enter) and the class's exchange.
"""

import os
from pathlib import Path

c = get_config()  # noqa: F821 - provided by the config loader
load_subconfig(str(Path(__file__).resolve().parents[2] / "nbgrader_config.py"))  # noqa: F821

c.CourseDirectory.root = os.environ.get("KV_COURSE_DIR", os.path.expanduser("~/key-vectors"))
c.CourseDirectory.course_id = "key-vectors"
c.Exchange.root = os.environ.get("KV_EXCHANGE", "/srv/nbgrader/exchange")
