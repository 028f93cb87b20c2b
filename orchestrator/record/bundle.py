"""A bundle: one zip file holding a run dir and what `orchestrator bundle` added to it (RunPaths.bundle), every
member under one folder named like the run, with a checksums manifest (sha256 per member, `sha256sum -c`'s
format) and the manifest's own checksum. Written here, and read back only after every check passed: no member
outside the folder (zip-slip), none missing or extra against the manifest, every checksum right. A bundle that
fails one is refused in one line (RecordError, exit 2). The stdlib's zipfile: no new dependency."""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import stat
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from orchestrator.errors import RecordError
from orchestrator.record.paths import RunPaths, atomic_write

AGAIN = "copy it again from its source (or ask its sender to make it again with `orchestrator bundle RUN`)"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _manifest_names(paths: RunPaths) -> tuple[str, str]:
    return (paths.manifest.relative_to(paths.root).as_posix(), paths.manifest_digest.relative_to(paths.root).as_posix())


def write(paths: RunPaths, members: Mapping[str, Path | bytes], dest: Path) -> int:
    """Zip `members` (a path relative to the run dir -> a file, or bytes) into `dest` under the run dir's name,
    each hashed as it streams in, then the manifest and its checksum; written to a temporary name, then renamed.
    Returns the member count, the manifest's two included."""
    manifest_name, digest_name = _manifest_names(paths)

    def member(name: str) -> zipfile.ZipInfo:  # no time or owner of this machine: the same run, the same bytes
        info = zipfile.ZipInfo(f"{paths.root.name}/{name}", date_time=(1980, 1, 1, 0, 0, 0))
        info.compress_type, info.external_attr = zipfile.ZIP_DEFLATED, 0o644 << 16
        return info

    def zipped(handle: BinaryIO) -> None:
        lines = []
        with zipfile.ZipFile(handle, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            for name in sorted(members):
                source, digest = members[name], hashlib.sha256()
                read = io.BytesIO(source) if isinstance(source, bytes) else source.open("rb")
                with read, archive.open(member(name), "w", force_zip64=True) as sink:
                    while chunk := read.read(1 << 20):
                        digest.update(chunk)
                        sink.write(chunk)
                lines.append(f"{digest.hexdigest()}  {name}\n")
            manifest = "".join(lines).encode()
            archive.writestr(member(manifest_name), manifest)
            archive.writestr(member(digest_name), f"{_sha256(manifest)}  {manifest_name}\n")

    atomic_write(dest, zipped)
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


def _listed(file: Path, top: str, archive: zipfile.ZipFile, infos: dict[str, zipfile.ZipInfo]) -> dict[str, str]:
    """{member: sha256} as the manifest lists them, once the manifest's own checksum matched and the members are
    exactly those it lists."""
    manifest_name, digest_name = _manifest_names(RunPaths(Path(top)))
    if manifest_name not in infos or digest_name not in infos:
        raise RecordError(f"{file}: {top}/{manifest_name if manifest_name not in infos else digest_name} is missing: "
                          f"not a bundle `orchestrator bundle` wrote, or a damaged one; {AGAIN}")
    manifest = archive.read(infos[manifest_name])
    if archive.read(infos[digest_name]).decode(errors="replace").split(" ")[0] != _sha256(manifest):
        raise RecordError(f"{file}: the manifest's checksum fails ({top}/{manifest_name}): the bundle is damaged; "
                          f"{AGAIN}")
    listed = {}
    for line in manifest.decode().splitlines():
        want, _, name = line.partition("  ")
        listed[name] = want
    if missing := sorted(set(listed) - set(infos)):
        raise RecordError(f"{file}: member '{top}/{missing[0]}' is in the manifest but not in the bundle "
                          f"({len(missing)} missing): the bundle is incomplete; {AGAIN}")
    if extra := sorted(set(infos) - set(listed) - {manifest_name, digest_name}):
        raise RecordError(f"{file}: member '{top}/{extra[0]}' is not in the manifest ({len(extra)} extra): it was "
                          f"added after the bundle was made; {AGAIN}")
    return {**listed, manifest_name: _sha256(manifest), digest_name: _sha256(archive.read(infos[digest_name]))}


def _copy(file: Path, top: str, archive: zipfile.ZipFile, info: zipfile.ZipInfo, want: str,
          sink: BinaryIO | None) -> None:
    """A member read a megabyte at a time, into `sink` if given, and refused unless its sha256 is `want`."""
    digest = hashlib.sha256()
    with archive.open(info) as member:
        while chunk := member.read(1 << 20):
            digest.update(chunk)
            if sink is not None:
                sink.write(chunk)
    if (got := digest.hexdigest()) != want:
        name = info.filename.removeprefix(f"{top}/")
        raise RecordError(f"{file}: member '{top}/{name}' fails its checksum (sha256 {got[:12]}..., the manifest "
                          f"says {want[:12]}...): the bundle is damaged; {AGAIN}")


def unpack(file: Path, cache: Path) -> RunPaths:
    """The bundle checked, member by member as it is unpacked into `cache`/KEY/NAME (KEY: the manifest's checksum,
    so the same bundle is unpacked once, and a changed one never lands on an older copy; an unpacked copy is
    taken again only after every member of the file matched again): a run dir like the one it was made of.
    Nothing is left in the cache by a bundle that fails a check."""
    try:
        with zipfile.ZipFile(file) as archive:
            top, infos = _checked_names(file, archive)
            listed = _listed(file, top, archive, infos)
            key = listed[_manifest_names(RunPaths(Path(top)))[0]][:20]
            target = RunPaths(cache / key / top)
            if target.meta.is_file():
                for name, want in listed.items():
                    _copy(file, top, archive, infos[name], want, None)
                return target
            cache.mkdir(parents=True, exist_ok=True)
            # a member is read no further than its stated size: what they state together must fit (a zip bomb)
            needs, free = sum(infos[name].file_size for name in listed), shutil.disk_usage(cache).free
            if needs > free:
                raise RecordError(f"{file}: its members unpack to {needs} bytes and {cache} has {free} free: refused, "
                                  "nothing unpacked; free space there, or set ORCHESTRATOR_CACHE_DIR to a folder with "
                                  "room")
            building = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=cache))
            try:
                for name, want in listed.items():
                    path = building / top / name
                    path.parent.mkdir(parents=True, exist_ok=True)
                    with path.open("wb") as sink:
                        _copy(file, top, archive, infos[name], want, sink)
                with contextlib.suppress(OSError):  # another process unpacked the same bundle first: as good
                    os.replace(building, cache / key)
            finally:
                shutil.rmtree(building, ignore_errors=True)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError, UnicodeDecodeError) as exc:
        raise RecordError(f"{file} is not a bundle, or a damaged one ({exc}): pass a file `orchestrator bundle RUN` "
                          f"wrote; {AGAIN}") from None
    except OSError as exc:
        raise RecordError(f"{file} cannot be read, or unpacked into {cache} ({exc.strerror or exc}): pass a file "
                          "`orchestrator bundle RUN` wrote; free space there, or set ORCHESTRATOR_CACHE_DIR to another "
                          "folder") from None
    if not target.meta.is_file():
        raise RecordError(f"{file} holds no run.json: not a run's bundle; {AGAIN}")
    return target
