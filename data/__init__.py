"""The course's shipped data, installed as the package ``attnlib.data``.

Lesson code reads these files through :func:`attnlib.tasks.shipped.data_file`
(``importlib.resources``), so an installed attnlib finds them as well as a checkout.
What each file is and which command regenerates it: ``README.md`` beside this file.
"""
