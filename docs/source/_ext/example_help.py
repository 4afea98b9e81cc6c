"""Prints, as JSON, the ``--help`` text of each example script named on the command line.

``python example_help.py EXAMPLES_DIR NAME...``: every script runs in this one process as
``__main__`` with ``--help`` (argparse prints its help and exits before any work), so torch and the
package are imported once for all of them.
"""
import contextlib
import io
import json
import os
import runpy
import sys


def main() -> None:
    examples_dir, names = sys.argv[1], sys.argv[2:]
    sys.path.insert(0, examples_dir)  # the scripts import their helper modules
    out = {}
    argv = sys.argv
    for name in names:
        path = os.path.join(examples_dir, f"{name}.py")
        buffer = io.StringIO()
        sys.argv = [f"{name}.py", "--help"]
        code = None
        try:
            with contextlib.redirect_stdout(buffer):
                runpy.run_path(path, run_name="__main__")
        except SystemExit as exit_:
            code = exit_.code
        finally:
            sys.argv = argv
        if code not in (0, None):
            print(f"examples/{name}.py --help exited with {code}", file=sys.stderr)
            sys.exit(1)
        out[name] = buffer.getvalue()
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
