"""ctxc's version, apart from the package facade so that modules inside ctxc need not import it."""

__version__ = "0.1.0"
