"""``python -m zipccl ARGS`` runs the zipccl tool that the wheel carries (``zipccl --help``)."""
import os
import sys

from ._paths import tool_path


def main() -> None:
    tool = tool_path()
    os.execv(tool, [tool] + sys.argv[1:])


if __name__ == "__main__":
    main()
