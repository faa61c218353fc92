"""Writing output files so that a failure never leaves a partial file behind."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from tessel_dsl.errors import TesselError


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write `text` to a temporary file beside `path`, then rename it into place.

    An unwritable destination is a TesselError naming the path, not a traceback.
    """
    path = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent if str(path.parent) else ".", prefix=f".{path.name}.",
                                   suffix=".tmp")
    except OSError as e:
        raise TesselError(f"{path}: cannot write: {e.strerror}") from None
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        # mkstemp creates 0600 files; outputs are ordinary shared artefacts.
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise TesselError(f"{path}: cannot write: {e.strerror}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
