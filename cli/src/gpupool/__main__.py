"""``python -m gpupool``."""

from gpupool.main import cli

cli(prog_name="gpupool")
