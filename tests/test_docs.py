"""Every command has help text that ends with an example; the README shows the quick start."""

from pathlib import Path

import typer

from kvtrace.cli import app

ROOT = Path(__file__).resolve().parents[1]


def test_every_command_has_help_with_example():
    cmd = typer.main.get_command(app)
    assert cmd.commands, "no commands registered"
    for name, sub in cmd.commands.items():
        assert sub.help, f"kvtrace {name} has no help"
        assert "Example:" in sub.help, f"kvtrace {name} help needs an 'Example:' line"


def test_readme_quick_start():
    text = (ROOT / "README.md").read_text()
    assert "make demo" in text and "make test" in text
