"""gpupool: the GPU Pool Portal's command-line client, over its REST API with a team token. No Django here."""

__version__ = "0.1.0"
