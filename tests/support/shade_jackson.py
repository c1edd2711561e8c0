"""Relocate pyspark's Jackson jars under Iceberg's shaded prefix, in pure Python.

The `snowpark-connect-deps-iceberg` wheel ships `iceberg-spark-runtime-3.5_2.12-1.10.2.jar` with
its shaded Jackson (`org.apache.iceberg.shaded.com.fasterxml.jackson.*`) stripped, so the first
catalog operation dies with `NoClassDefFoundError: org/apache/iceberg/shaded/com/fasterxml/jackson/
core/JsonFactoryBuilder`. Iceberg 1.10 builds against Jackson 2.x and pyspark 3.5 ships Jackson
2.15.2, so we re-create the missing classes the way the Maven/Gradle shade plugin would:

* every `CONSTANT_Utf8` entry of every class file's constant pool has `com/fasterxml/jackson/`
  rewritten to `org/apache/iceberg/shaded/com/fasterxml/jackson/` (class names, descriptors,
  signatures) and `com.fasterxml.jackson.` to `org.apache.iceberg.shaded.com.fasterxml.jackson.`
  (string constants used for reflection / service lookup);
* entries move to the relocated paths;
* `META-INF/services/com.fasterxml.jackson.*` files are renamed and their contents relocated.

Only the constant pool changes: Utf8 entries carry their own length, so nothing after the pool
(fields, methods, attributes - all of which address the pool by index) has to be touched.
Multi-release overlays (`META-INF/versions/N/...`) and `module-info.class` are dropped; the base
classes are complete for Java 8+.

The result is one jar cached under `<repo>/.cache/jars/`, keyed by the input jar names and sizes.
"""

from __future__ import annotations

import hashlib
import os
import struct
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path

SLASH_FROM = b"com/fasterxml/jackson/"
SLASH_TO = b"org/apache/iceberg/shaded/com/fasterxml/jackson/"
DOT_FROM = b"com.fasterxml.jackson."
DOT_TO = b"org.apache.iceberg.shaded.com.fasterxml.jackson."

JACKSON_ARTIFACTS = ("jackson-core", "jackson-databind", "jackson-annotations", "jackson-datatype-jsr310")

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CACHE_DIR = REPO_ROOT / ".cache" / "jars"

# Constant pool entry sizes (after the tag byte) for the fixed-size tags.
_FIXED_SIZES = {
    3: 4,  # Integer
    4: 4,  # Float
    5: 8,  # Long (2 slots)
    6: 8,  # Double (2 slots)
    7: 2,  # Class
    8: 2,  # String
    9: 4,  # Fieldref
    10: 4,  # Methodref
    11: 4,  # InterfaceMethodref
    12: 4,  # NameAndType
    15: 3,  # MethodHandle
    16: 2,  # MethodType
    17: 4,  # Dynamic
    18: 4,  # InvokeDynamic
    19: 2,  # Module
    20: 2,  # Package
}


class ClassFileError(ValueError):
    pass


def _relocate_bytes(value: bytes) -> bytes:
    if SLASH_FROM in value:
        value = _replace_unshaded(value, SLASH_FROM, SLASH_TO)
    if DOT_FROM in value:
        value = _replace_unshaded(value, DOT_FROM, DOT_TO)
    return value


def _replace_unshaded(value: bytes, old: bytes, new: bytes) -> bytes:
    """Replace `old` by `new` unless the occurrence is already the tail of `new` (idempotent)."""
    prefix = new[: len(new) - len(old)]
    out = bytearray()
    i = 0
    while True:
        j = value.find(old, i)
        if j < 0:
            out += value[i:]
            return bytes(out)
        out += value[i:j]
        if j >= len(prefix) and value[j - len(prefix) : j] == prefix:
            out += old  # already relocated
        else:
            out += new
        i = j + len(old)


def iter_constant_pool(data: bytes) -> Iterator[tuple[int, int, int, int]]:
    """Yield (index, tag, start, end) for each constant-pool entry; start..end spans tag+payload."""
    if data[:4] != b"\xca\xfe\xba\xbe":
        raise ClassFileError("not a class file")
    (count,) = struct.unpack_from(">H", data, 8)
    pos = 10
    index = 1
    while index < count:
        tag = data[pos]
        if tag == 1:
            (length,) = struct.unpack_from(">H", data, pos + 1)
            end = pos + 3 + length
        elif tag in _FIXED_SIZES:
            end = pos + 1 + _FIXED_SIZES[tag]
        else:
            raise ClassFileError(f"unknown constant pool tag {tag} at offset {pos}")
        yield index, tag, pos, end
        index += 2 if tag in (5, 6) else 1
        pos = end


def constant_pool_end(data: bytes) -> int:
    last = 10
    for entry in iter_constant_pool(data):
        last = entry[3]
    return last


def utf8_constants(data: bytes) -> dict[int, bytes]:
    return {i: data[s + 3 : e] for i, tag, s, e in iter_constant_pool(data) if tag == 1}


def class_references(data: bytes) -> set[str]:
    """Internal names of the CONSTANT_Class entries (array descriptors stripped to element class)."""
    utf8: dict[int, bytes] = {}
    class_name_indexes: list[int] = []
    for i, tag, s, e in iter_constant_pool(data):
        if tag == 1:
            utf8[i] = data[s + 3 : e]
        elif tag == 7:
            class_name_indexes.append(struct.unpack_from(">H", data, s + 1)[0])
    names: set[str] = set()
    for ni in class_name_indexes:
        name = utf8[ni].decode("utf-8", "replace")
        if name.startswith("["):
            name = name.lstrip("[")
            if not name.startswith("L"):
                continue  # primitive array
            name = name[1:-1]
        names.add(name)
    return names


def relocate_class(data: bytes) -> bytes:
    """Class file bytes with every Jackson reference in the constant pool relocated."""
    out = bytearray(data[:10])
    last = 10
    changed = False
    for _, tag, start, end in iter_constant_pool(data):
        if tag != 1:
            continue
        raw = data[start + 3 : end]
        new = _relocate_bytes(raw)
        if new is raw or new == raw:
            continue
        if len(new) > 0xFFFF:
            raise ClassFileError("relocated constant longer than 65535 bytes")
        out += data[last:start]
        out += b"\x01" + struct.pack(">H", len(new)) + new
        last = end
        changed = True
    if not changed:
        return data
    out += data[last:]
    return bytes(out)


def relocate_path(name: str) -> str:
    if name.startswith("META-INF/services/"):
        return "META-INF/services/" + _relocate_bytes(name[len("META-INF/services/") :].encode()).decode()
    return _relocate_bytes(name.encode()).decode()


def _keep(name: str) -> bool:
    if name.endswith("/"):
        return False  # directories are implied
    if name.startswith("META-INF/versions/") or name.endswith("module-info.class"):
        return False
    if name.startswith("META-INF/services/"):
        return True
    if name.startswith("META-INF/"):
        return False  # manifests, maven poms, licenses (the service files are all we need)
    return True


def shade_jars(inputs: Iterable[Path], output: Path) -> dict[str, int]:
    """Write the relocated union of `inputs` to `output`; returns {"classes": n, "services": n}."""
    seen: set[str] = set()
    stats = {"classes": 0, "services": 0}
    tmp = output.with_name(output.name + f".tmp{os.getpid()}")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as zout:
        manifest = "Manifest-Version: 1.0\nCreated-By: icetail tests/support/shade_jackson.py\n\n"
        zout.writestr("META-INF/MANIFEST.MF", manifest)
        for jar in inputs:
            with zipfile.ZipFile(jar) as zin:
                for info in zin.infolist():
                    name = info.filename
                    if not _keep(name):
                        continue
                    data = zin.read(info)
                    if name.endswith(".class"):
                        data = relocate_class(data)
                        stats["classes"] += 1
                    elif name.startswith("META-INF/services/"):
                        data = _relocate_bytes(data)
                        stats["services"] += 1
                    new_name = relocate_path(name)
                    if new_name in seen:
                        continue
                    seen.add(new_name)
                    zout.writestr(new_name, data)
    os.replace(tmp, output)
    return stats


def pyspark_jackson_jars() -> list[Path]:
    import pyspark

    jars_dir = Path(pyspark.__file__).resolve().parent / "jars"
    found: list[Path] = []
    for artifact in JACKSON_ARTIFACTS:
        matches = sorted(p for p in jars_dir.glob(f"{artifact}-2.*.jar"))
        if not matches:
            raise FileNotFoundError(f"{artifact}-2.*.jar not found in {jars_dir}")
        found.append(matches[-1])
    return found


def shaded_jackson_jar(cache_dir: Path | None = None, inputs: list[Path] | None = None) -> Path:
    """Path of the cached relocated Jackson jar, building it (about a second) if needed."""
    inputs = inputs if inputs is not None else pyspark_jackson_jars()
    cache_dir = cache_dir or DEFAULT_CACHE_DIR
    cache_dir.mkdir(parents=True, exist_ok=True)
    key = hashlib.sha256(
        "\n".join(f"{p.name}:{p.stat().st_size}" for p in inputs).encode() + b"\nv1"
    ).hexdigest()[:16]
    output = cache_dir / f"iceberg-shaded-jackson-{key}.jar"
    if not output.exists():
        shade_jars(inputs, output)
    return output


if __name__ == "__main__":
    import time

    t0 = time.perf_counter()
    path = shaded_jackson_jar()
    print(f"{path} ({time.perf_counter() - t0:.2f}s)")
