import json

import pytest

from costsim.cli import main


class Result:
    def __init__(self, code, out, err):
        self.exit_code, self.stdout, self.stderr = code, out, err

    def json(self):
        return json.loads(self.stdout)


@pytest.fixture
def run_cli(capsys):
    """Run the costsim entry point in-process, as a user would: exit code, stdout, stderr."""
    def run(*args):
        try:
            main(list(args))
            code = 0
        except SystemExit as exit_:
            code = exit_.code or 0
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)
    return run
