"""A directory for Spark's Python processes' path, holding only ``sitecustomize`` (see there).

``rivulet.spark.session`` puts this directory on the path of the Python processes Spark starts;
it is a package only so that it is installed with Rivulet.
"""
