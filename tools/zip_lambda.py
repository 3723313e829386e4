"""Zips each function's `bootstrap` the way Lambda takes it (one `bootstrap` entry, mode
0755, deflated), so `make package` reports deployment-package sizes from the one
`cargo lambda build` it runs instead of building everything a second time with
`--output-format zip`.

Usage: zip_lambda.py <lambda dir> <zip dir> <name>...
Reads <lambda dir>/<name>/bootstrap, writes <zip dir>/<name>/bootstrap.zip, prints sizes.
"""

import sys
import zipfile
from pathlib import Path


def main() -> int:
    if len(sys.argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    src, dst, names = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]
    for name in names:
        binary = src / name / "bootstrap"
        if not binary.is_file():
            print(f"{binary} is missing: did cargo lambda build {name}?", file=sys.stderr)
            return 1
        out = dst / name / "bootstrap.zip"
        out.parent.mkdir(parents=True, exist_ok=True)
        info = zipfile.ZipInfo("bootstrap", date_time=(2026, 1, 1, 0, 0, 0))
        info.external_attr = (0o100755 << 16)
        info.compress_type = zipfile.ZIP_DEFLATED
        with zipfile.ZipFile(out, "w") as z:
            z.writestr(info, binary.read_bytes(), compresslevel=6)
        print(f"{name:<12} bootstrap.zip {out.stat().st_size:>9} bytes "
              f"({out.stat().st_size / 1e6:.2f} MB; Lambda limit for a direct upload: 50 MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
