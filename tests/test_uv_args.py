"""tools/uv_args.py: uv gets the sources pip is configured with (torch's CPU wheel, never PyPI's CUDA one)."""

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("uv_args", ROOT / "tools" / "uv_args.py")
uv_args = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(uv_args)

LISTED = """\
:env:.find-links='/opt/wheels'
:env:.default-timeout='180'
global.cert='/etc/ssl/certs/ca-certificates.crt'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.find-links='/elsewhere'
"""


def test_pip_config_list_becomes_uv_options():
    config = uv_args.parse_config_list(LISTED)
    assert config["find-links"] == "/opt/wheels"  # the PIP_* variable wins over pip.conf, as in pip
    args = uv_args.uv_args(config, exists=lambda path: True)
    assert args == [
        "--extra-index-url", "file:///opt/pypi/simple",
        "--extra-index-url", "file:///opt/pypi-more/simple",
        "--find-links", "/opt/wheels",
        "--constraint", "/etc/xdg/pip/constraints.txt",
        "--index-strategy", "unsafe-best-match",
    ]  # fmt: skip


def test_precedence_env_over_install_over_global():
    listed = "global.index-url='https://a/simple'\ninstall.index-url='https://b/simple'\n"
    assert uv_args.parse_config_list(listed)["index-url"] == "https://b/simple"
    listed += ":env:.index-url='https://c/simple'\n"
    assert uv_args.uv_args(uv_args.parse_config_list(listed))[:2] == ["--index-url", "https://c/simple"]


def test_missing_local_find_links_is_left_out_remote_kept():
    config = {"find-links": "/no/such/dir file:///no/such/other https://host/links /there"}
    args = uv_args.uv_args(config, exists=lambda path: path == "/there")
    assert args == [
        "--find-links",
        "https://host/links",
        "--find-links",
        "/there",
        "--index-strategy",
        "unsafe-best-match",
    ]


def test_no_index_and_unrelated_keys():
    args = uv_args.uv_args(uv_args.parse_config_list("global.no-index='true'\nglobal.timeout='60'\nnot a line\n"))
    assert args == ["--no-index", "--index-strategy", "unsafe-best-match"]


def test_runs_against_this_pythons_pip():
    out = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "uv_args.py")], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out[-2:] == ["--index-strategy", "unsafe-best-match"]
    assert all(line for line in out)  # one option or value per line, none empty (the Makefile reads them so)
