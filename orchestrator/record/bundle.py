"""A bundle: one zip file holding a run dir and what `orchestrator bundle` added to it (RunPaths.bundle), every
member under one folder named like the run, with a checksums manifest (sha256 per member, `sha256sum -c`'s
format) and the manifest's own checksum. Written here, and read back only after every check passed: no member
outside the folder (zip-slip), none missing or extra against the manifest, every checksum right. A bundle that
fails one is refused in one line (RecordError, exit 2). The stdlib's zipfile: no new dependency."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from orchestrator.errors import RecordError
from orchestrator.record.paths import RunPaths, atomic_write_bytes

AGAIN = "copy it again from its source (or ask its sender to make it again with `orchestrator bundle RUN`)"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _manifest_names(paths: RunPaths) -> tuple[str, str]:
    return (paths.manifest.relative_to(paths.root).as_posix(), paths.manifest_digest.relative_to(paths.root).as_posix())


def write(paths: RunPaths, members: Mapping[str, Path | bytes], dest: Path) -> int:
    """Zip `members` (a path relative to the run dir -> a file, or bytes) into `dest` under the run dir's name,
    with the manifest and its checksum; written whole to a temporary name, then renamed. Returns the member count,
    the manifest's two included."""
    manifest_name, digest_name = _manifest_names(paths)
    lines = []
    with tempfile.SpooledTemporaryFile(max_size=64 << 20) as spool:
        with zipfile.ZipFile(spool, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            for name in sorted(members):
                source = members[name]
                data = source if isinstance(source, bytes) else source.read_bytes()
                lines.append(f"{_sha256(data)}  {name}\n")
                archive.writestr(f"{paths.root.name}/{name}", data)
            manifest = "".join(lines).encode()
            archive.writestr(f"{paths.root.name}/{manifest_name}", manifest)
            archive.writestr(f"{paths.root.name}/{digest_name}", f"{_sha256(manifest)}  {manifest_name}\n")
        spool.seek(0)
        atomic_write_bytes(dest, spool.read())
    return len(members) + 2


def _checked_names(file: Path, archive: zipfile.ZipFile) -> tuple[str, dict[str, zipfile.ZipInfo]]:
    """The bundle's folder and its files by path inside it; refused when a member would land outside the folder
    (an absolute path, '..', a second top folder), is a link, or comes twice."""
    top, found = None, {}
    for info in archive.infolist():
        parts = PurePosixPath(info.filename.rstrip("/")).parts
        escapes = (info.filename.startswith("/") or "\\" in info.filename or not parts
                   or any(part in ("", ".", "..") for part in parts) or (top is not None and parts[0] != top))
        if escapes:
            raise RecordError(f"{file}: member '{info.filename}' would be written outside the bundle's folder "
                              f"({top or 'an absolute path or ..'}): refused, nothing unpacked; {AGAIN}")
        top = parts[0]
        if stat.S_ISLNK(info.external_attr >> 16):
            raise RecordError(f"{file}: member '{info.filename}' is a link, and a bundle holds plain files only: "
                              f"refused, nothing unpacked; {AGAIN}")
        if info.is_dir():
            continue
        name = PurePosixPath(*parts[1:]).as_posix()
        if name in found:
            raise RecordError(f"{file}: member '{info.filename}' comes twice: refused, nothing unpacked; {AGAIN}")
        found[name] = info
    if top is None:
        raise RecordError(f"{file} is an empty zip, not a bundle: pass a file `orchestrator bundle RUN` wrote")
    return top, found


def verified(file: Path) -> tuple[str, dict[str, bytes], str]:
    """The bundle's folder name, every member's bytes (the manifest's two left out) and the manifest's checksum,
    once every check passed."""
    try:
        with zipfile.ZipFile(file) as archive:
            top, infos = _checked_names(file, archive)
            paths = RunPaths(Path(top))
            manifest_name, digest_name = _manifest_names(paths)
            if manifest_name not in infos or digest_name not in infos:
                raise RecordError(f"{file}: {top}/{manifest_name if manifest_name not in infos else digest_name} is "
                                  f"missing: not a bundle `orchestrator bundle` wrote, or a damaged one; {AGAIN}")
            manifest = archive.read(infos[manifest_name])
            if archive.read(infos[digest_name]).decode(errors="replace").split(" ")[0] != _sha256(manifest):
                raise RecordError(f"{file}: the manifest's checksum fails ({top}/{manifest_name}): the bundle is "
                                  f"damaged; {AGAIN}")
            listed = {}
            for line in manifest.decode().splitlines():
                want, _, name = line.partition("  ")
                listed[name] = want
            if missing := sorted(set(listed) - set(infos)):
                raise RecordError(f"{file}: member '{top}/{missing[0]}' is in the manifest but not in the bundle "
                                  f"({len(missing)} missing): the bundle is incomplete; {AGAIN}")
            if extra := sorted(set(infos) - set(listed) - {manifest_name, digest_name}):
                raise RecordError(f"{file}: member '{top}/{extra[0]}' is not in the manifest ({len(extra)} extra): "
                                  f"it was added after the bundle was made; {AGAIN}")
            members = {}
            for name, want in listed.items():
                data = archive.read(infos[name])
                if (got := _sha256(data)) != want:
                    raise RecordError(f"{file}: member '{top}/{name}' fails its checksum (sha256 {got[:12]}..., the "
                                      f"manifest says {want[:12]}...): the bundle is damaged; {AGAIN}")
                members[name] = data
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError, UnicodeDecodeError) as exc:
        raise RecordError(f"{file} is not a bundle, or a damaged one ({exc}): pass a file `orchestrator bundle RUN` "
                          f"wrote; {AGAIN}") from None
    except OSError as exc:
        raise RecordError(f"{file} cannot be read ({exc.strerror or exc}): pass a file `orchestrator bundle RUN` "
                          "wrote") from None
    return top, members, _sha256(manifest)


def unpack(file: Path, cache: Path) -> RunPaths:
    """The bundle verified, then unpacked into `cache`/KEY/NAME (KEY: the manifest's checksum, so the same bundle
    is unpacked once, and a changed one never lands on an older copy): a run dir like the one it was made of."""
    top, members, manifest_sha256 = verified(file)
    key = manifest_sha256[:20]
    target = RunPaths(cache / key / top)
    if target.meta.is_file():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=cache))
    try:
        for name, data in members.items():
            path = building / top / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        os.replace(building, cache / key)
    except OSError as exc:
        if not target.meta.is_file():  # another process unpacked the same bundle first: that copy is as good
            raise RecordError(f"{file} cannot be unpacked into {cache} ({exc.strerror or exc}): free space there, or "
                              "set ORCHESTRATOR_CACHE_DIR to another folder") from None
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return target
