#!/usr/bin/env python3
"""Drop GPU code that an sm_90 (H100/H200) GPU never loads from a CUDA shared library, in place.

A CUDA library keeps its device code in the ELF section .nv_fatbin: one fatbin per translation
unit (TU, one .cu file), each a header plus one entry (cubin or PTX) per target arch. This tool
rewrites each fatbin where it lies: header + the entries it keeps, its size field shrunk, the
freed bytes zeroed (they then compress to nothing). Nothing else in the file moves, so the host
code's pointers to each fatbin (.nvFatBinSegment) stay valid; the result is what nvcc would have
produced with fewer -gencode targets (or, for a TU dropped whole, with no target the GPU can use:
a launch of one of its kernels then fails with "no kernel image is available").

  fatprune.py FILE.so --arch 90 [--arch ...] [--keep-tu REGEX]

--arch N      keep entries for sm_N (sm_90 and sm_90a both read 90); drop the others.
--keep-tu RE  drop ALL entries of a TU whose name (taken from its _INTERNAL_<hash>_<len>_<file>
              symbols, e.g. flash_fwd_hdim128_bf16_paged_sm90_cu) does not match RE (re.search).
              A TU whose name cannot be read is kept.
"""
import argparse
import re
import struct
import subprocess
import sys

MAGIC = 0xBA55ED50
COMPRESSED = 0x8000  # entry flag: payload is compressed (then no symbol names can be read)


def section(path, name):
    for line in subprocess.check_output(["readelf", "-SW", path], text=True).splitlines():
        p = line.replace("[ ", "[").split()
        if len(p) > 6 and p[0].startswith("[") and p[1] == name:
            return int(p[4], 16), int(p[5], 16)
    return None


def entries(data, pos, end):
    e = pos
    while e < end:
        kind, _, ehsz, psz = struct.unpack_from("<HHIQ", data, e)
        arch = struct.unpack_from("<I", data, e + 28)[0]
        flags = struct.unpack_from("<Q", data, e + 40)[0]
        if kind not in (1, 2) or ehsz < 64:
            raise SystemExit(f"unexpected fatbin entry at {e:#x}: kind={kind} header={ehsz}")
        yield e, ehsz, psz, arch, flags
        e += ehsz + psz
    if e != end:
        raise SystemExit(f"fatbin entries overrun at {e:#x}")


def tu_name(data, ents):
    for e, ehsz, psz, arch, flags in ents:
        if flags & COMPRESSED:
            continue
        m = re.search(rb"_INTERNAL_[0-9a-f]{8}_(\d+)_([A-Za-z0-9_]+)", data[e + ehsz:e + ehsz + psz])
        if m:
            return m.group(2)[:int(m.group(1))].decode()
    return None


def prune(path, archs, keep_tu=None, verbose=False):
    sec = section(path, ".nv_fatbin")
    if sec is None:
        return None
    off, size = sec
    with open(path, "r+b") as f:
        f.seek(off)
        data = bytearray(f.read(size))
        pos = 0
        st = dict(fatbins=0, tus_dropped=0, kept=0, dropped=0, unnamed=0)
        while pos + 16 <= size:
            magic, _, hsz, fsz = struct.unpack_from("<IHHQ", data, pos)
            if magic != MAGIC:  # alignment padding between fatbins
                if any(data[pos:pos + 8]):
                    raise SystemExit(f"{path}: junk between fatbins at {pos:#x}")
                pos += 8
                continue
            end = pos + hsz + fsz
            ents = list(entries(data, pos + hsz, end))
            st["fatbins"] += 1
            drop_tu = False
            if keep_tu is not None:
                name = tu_name(data, ents)
                if name is None:
                    st["unnamed"] += 1
                elif not re.search(keep_tu, name):
                    drop_tu = True
                    st["tus_dropped"] += 1
                if verbose:
                    print(("drop " if drop_tu else "keep ") + str(name))
            out = bytearray()
            for e, ehsz, psz, arch, flags in ents:
                blob = data[e:e + ehsz + psz]
                if not drop_tu and arch in archs:
                    out += blob
                    st["kept"] += len(blob)
                else:
                    st["dropped"] += len(blob)
            struct.pack_into("<Q", data, pos + 8, len(out))
            data[pos + hsz:end] = out + bytes(end - pos - hsz - len(out))
            pos = end
        f.seek(off)
        f.write(data)
    return st


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--arch", type=int, action="append", required=True)
    ap.add_argument("--keep-tu")
    ap.add_argument("-v", action="store_true")
    a = ap.parse_args()
    st = prune(a.file, set(a.arch), a.keep_tu, a.v)
    if st is None:
        print(f"{a.file}: no .nv_fatbin")
        sys.exit(0)
    print(f"{a.file}: {st['fatbins']} fatbins, {st['tus_dropped']} TUs dropped whole, "
          f"{st['unnamed']} unnamed; kept {st['kept'] / 2**20:.1f} MiB of device code, "
          f"zeroed {st['dropped'] / 2**20:.1f} MiB")
