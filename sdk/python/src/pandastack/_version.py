# The one place the Python SDK's version is written: pyproject.toml reads it from here
# ([tool.setuptools.dynamic]), the package exports it as pandastack.__version__ and sends it in
# the User-Agent.
__version__ = "0.1.0"
