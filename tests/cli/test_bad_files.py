"""A job file the client cannot use is refused in one line — the file, what is wrong — with exit 2, before any request
(issue 33, finding 8: binary garbage was a UnicodeDecodeError traceback, a 50,000-deep list a RecursionError)."""

from __future__ import annotations

import socket

import pytest
from click.testing import CliRunner

from gpupool.main import cli
from gpupool.spec import MAX_FILE_BYTES

PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


CASES = {
    "binary garbage": (PNG + bytes(range(256)) * 4, "not UTF-8 text (byte 0x89 at offset 0): is it a binary file?"),
    "a NUL byte": (b"name: x\x00\n", "contains a NUL byte at offset 7"),
    "50,000-deep list": (b"[" * 50_000 + b"]" * 50_000, "nested deeper than 32 levels"),
    "50,000-deep mapping": (b"{a: " * 50_000 + b"1" + b"}" * 50_000, "nested deeper than 32 levels"),
    "block nesting": ("".join(f"{' ' * i}a:\n" for i in range(200)).encode(), "nested deeper than 32 levels"),
    "an alias bomb": (b"a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]\n", "anchors and aliases (*name) are not accepted"),
    "a control character": (b"name: x\x01\n", "character U+0001 at offset 7 is not allowed"),
    "broken YAML": (b"name: x\n  image: [\n", "not valid YAML: mapping values are not allowed here (line 2, column 8)"),
    "an unclosed flow": (b"name: [x\n", "not valid YAML: while parsing a flow sequence"),
    "a list": (b"- a\n- b\n", "expected a mapping of fields (name: …, image: …), not list"),
    "an unknown key": (b"name: x\ngpu: 2\n", "unknown key 'gpu'"),
    "a bad duration": (b"name: x\nmax_runtime: soon\n", "max_runtime: 'soon' is not a duration"),
    "too large": (b"# " + b"x" * MAX_FILE_BYTES + b"\n", "larger than 1024 KiB: not a job file"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_file_is_one_line_naming_the_file_and_exit_2(tmp_path, case):
    content, problem = CASES[case]
    path = tmp_path / "job.yaml"
    path.write_bytes(content)
    result = CliRunner().invoke(cli, ["--url", f"http://127.0.0.1:{_closed_port()}", "--token", "gpp_x",
                                      "submit", "-f", str(path)])  # fmt: skip
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"gpupool: {path}: "), lines[0]
    assert problem in lines[0]
    assert result.stdout == ""  # no request was made (the portal's address is a closed port)


def test_a_missing_file_is_one_line_and_a_directory_a_usage_error(tmp_path):
    missing = tmp_path / "missing.yaml"
    result = CliRunner().invoke(cli, ["--url", "http://127.0.0.1:1", "--token", "gpp_x", "submit", "-f", str(missing)])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [f"gpupool: cannot read {missing}: No such file or directory"]
    result = CliRunner().invoke(cli, ["--url", "http://127.0.0.1:1", "--token", "gpp_x", "submit", "-f", str(tmp_path)])
    assert result.exit_code == 2  # click's own check of -f
    assert "is a directory" in result.stderr


def test_a_bad_flag_value_is_a_usage_error_too():
    result = CliRunner().invoke(cli, ["--url", "http://127.0.0.1:1", "--token", "gpp_x", "submit", "--max-runtime",
                                      "soon", "--pod-set", "head"])  # fmt: skip
    assert result.exit_code == 2
    assert len(result.stderr.splitlines()) == 1
