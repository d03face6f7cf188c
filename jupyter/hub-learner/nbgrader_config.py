"""nbgrader in a learner's server on the class hub (hub/jupyterhub_config.py puts this folder
on the learner's JUPYTER_CONFIG_PATH): the course's id and the exchange, nothing else.

A learner's server needs no grader: it fetches, submits and fetches feedback through the
Assignments panel, which reads these two settings.
"""

import os

c = get_config()  # noqa: F821 - provided by the config loader

c.CourseDirectory.course_id = "key-vectors"
c.Exchange.root = os.environ.get("KV_EXCHANGE", "/srv/nbgrader/exchange")
