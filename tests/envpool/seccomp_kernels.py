"""Runs rlide's seccomp filters in real kernels: this machine's, and aarch64 and riscv64 ones under qemu.

`seccomp_probe.c` is built statically for each ABI with the cross toolchains Debian ships and
booted as the only program (PID 1) of a tiny initramfs on an unmodified Debian kernel, under
`qemu-system-aarch64`/`qemu-system-riscv64` in full-system emulation. qemu's user-mode emulation
would not do: it runs the guest's syscalls on the host kernel, which knows nothing of the guest's
seccomp ABI. The kernels are pinned by sha256 and cached; `scripts/setup_seccomp_kernels.sh`
(root; `make setup` runs it) installs the toolchains and fetches them, and `python -m tests.envpool.seccomp_kernels
fetch` fetches the kernels alone.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from envpool.sandbox.seccomp import AARCH64, DENY_ENOSYS, DENY_EPERM, RISCV64, Abi, assemble, build_program

PROBE_SOURCE = Path(__file__).with_name("seccomp_probe.c")
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "rlide" / "seccomp-kernels"
BOOT_TIMEOUT_S = 300


@dataclass(frozen=True)
class Kernel:
    """A Debian kernel package, where its image lies in it, and how qemu boots it."""

    urls: tuple[str, ...]  # the pool's, then snapshot.debian.org's for when the pool has dropped it
    sha256: str
    image_prefix: str  # the member of the package's data.tar that is the bootable image
    qemu: tuple[str, ...]
    console: str


@dataclass(frozen=True)
class Guest:
    """One foreign ABI: its filter, its C toolchain, its kernel; `foreign_cc` builds a program of
    the 32-bit ABI that the filter must kill (None where the kernel runs no such programs)."""

    name: str
    abi: Abi
    cc: str
    kernel: Kernel
    foreign_cc: str | None = None


def _debian(path: str, snapshot: str) -> tuple[str, ...]:
    return (f"http://deb.debian.org/debian/{path}", f"https://snapshot.debian.org/archive/debian/{snapshot}/{path}")


GUESTS = {
    "aarch64": Guest(
        "aarch64",
        AARCH64,
        "aarch64-linux-gnu-gcc",
        Kernel(
            _debian("pool/main/l/linux/linux-image-6.1.0-50-arm64-unsigned_6.1.176-1_arm64.deb", "20260801T000000Z"),
            "31ba9c41615c6e3a2c5397671ecd169af9822871cf19a6ac711d56b39833bd08",
            "./boot/vmlinuz-",
            ("qemu-system-aarch64", "-M", "virt", "-cpu", "max"),
            "ttyAMA0",
        ),
        foreign_cc="arm-linux-gnueabihf-gcc",
    ),
    "riscv64": Guest(
        "riscv64",
        RISCV64,
        "riscv64-linux-gnu-gcc",
        Kernel(
            _debian("pool/main/l/linux/linux-image-6.12.107+deb13-riscv64_6.12.107-1_riscv64.deb", "20261001T000000Z"),
            "abe9f65d74b434692149482b031db7a2aaf832921e09f69f775293c0e0c5799c",
            "./boot/vmlinux-",
            ("qemu-system-riscv64", "-M", "virt", "-bios", "default"),
            "ttyS0",
        ),
    ),
}


@dataclass
class ProbeReport:
    """What the probe printed: each denied call's errno (expected, unfiltered, filtered) and its checks."""

    calls: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    checks: dict[str, str] = field(default_factory=dict)  # name -> "ok" or "FAIL <detail>"
    done: bool = False
    output: str = ""

    @classmethod
    def parse(cls, output: str) -> ProbeReport:
        report = cls(output=output)
        for line in output.splitlines():
            words = line.strip().split()
            if words[:1] == ["CALL"] and len(words) == 5:
                report.calls[words[1]] = (int(words[2]), int(words[3]), int(words[4]))
            elif words[:1] == ["CHECK"] and len(words) >= 3:
                report.checks[words[1]] = " ".join(words[2:]) if words[2] != "ok" else "ok"
            elif line.strip() == "PROBE DONE":
                report.done = True
        return report

    def problems(self) -> list[str]:
        """Everything that is not as the filter intends; empty when the filter works."""
        found = [] if self.done else ["the probe did not finish"]
        missing = sorted((set(DENY_EPERM) | set(DENY_ENOSYS)) - set(self.calls))
        found += [f"{name}: not probed" for name in missing]
        found += [
            f"{name}: errno {filtered} under the filter, expected {expected} (unfiltered: {control})"
            for name, (expected, control, filtered) in self.calls.items()
            if filtered != expected
        ]
        found += [f"check {name}: {verdict}" for name, verdict in self.checks.items() if verdict != "ok"]
        return found


def missing_tools(guest: Guest) -> list[str]:
    tools = [guest.cc, guest.kernel.qemu[0], *([guest.foreign_cc] if guest.foreign_cc else [])]
    return [tool for tool in tools if shutil.which(tool) is None]


def kernel_image(guest: Guest, *, fetch: bool = False) -> Path | None:
    """The cached kernel image of `guest`; with `fetch`, downloaded and checked first if missing."""
    image = CACHE / f"{guest.kernel.sha256[:16]}-{guest.name}.img"
    if image.exists() or not fetch:
        return image if image.exists() else None
    package = _download(guest.kernel)
    CACHE.mkdir(parents=True, exist_ok=True)
    partial = image.with_suffix(".partial")
    partial.write_bytes(_deb_member(package, guest.kernel.image_prefix))
    partial.replace(image)
    return image


def _download(kernel: Kernel) -> bytes:
    errors = []
    for url in kernel.urls:
        try:
            with urllib.request.urlopen(url, timeout=60) as response:
                data: bytes = response.read()
        except OSError as exc:
            errors.append(f"{url}: {exc}")
            continue
        digest = hashlib.sha256(data).hexdigest()
        if digest == kernel.sha256:
            return data
        errors.append(f"{url}: sha256 {digest}, pinned {kernel.sha256}")
    raise RuntimeError("no pinned kernel package could be fetched: " + "; ".join(errors))


def _deb_member(package: bytes, prefix: str) -> bytes:
    """The first file of a .deb's data.tar.xz whose name starts with `prefix`."""
    if not package.startswith(b"!<arch>\n"):
        raise ValueError("not a Debian package (no ar header)")
    offset = 8
    while offset < len(package):
        header = package[offset : offset + 60]
        name, size = header[:16].decode().strip().rstrip("/"), int(header[48:58].decode())
        body = package[offset + 60 : offset + 60 + size]
        offset += 60 + size + size % 2
        if name == "data.tar.xz":
            with tarfile.open(fileobj=io.BytesIO(body), mode="r:xz") as tar:  # streamed: ~400 MB unpacked
                for member in tar:
                    if member.isfile() and member.name.startswith(prefix):
                        extracted = tar.extractfile(member)
                        assert extracted is not None
                        return extracted.read()
            raise ValueError(f"no {prefix}* in the package")
    raise ValueError("the package has no data.tar.xz")


def probe_list() -> str:
    """probe_list.h: one DENY(name, errno) per denied syscall, from rlide's own lists."""
    return "".join(
        [f"DENY({name}, EPERM)\n" for name in DENY_EPERM] + [f"DENY({name}, ENOSYS)\n" for name in DENY_ENOSYS]
    )


def build_probe(cc: str, workdir: Path) -> Path:
    (workdir / "probe_list.h").write_text(probe_list())
    out = workdir / f"probe-{Path(cc).name}"
    compile_static(cc, PROBE_SOURCE, out, "-pthread", f"-I{workdir}")
    return out


def compile_static(cc: str, source: Path, out: Path, *flags: str) -> None:
    """Build a static program; RuntimeError with the compiler's message when it fails."""
    done = subprocess.run([cc, "-static", "-O2", *flags, "-o", str(out), str(source)], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{cc} failed on {source.name}:\n{done.stderr}")


def newc_archive(files: dict[str, tuple[bytes, int]]) -> bytes:
    """A gzipped cpio archive (the "newc" format the kernel unpacks as its initramfs)."""
    out = bytearray()
    entries = [*files.items(), ("TRAILER!!!", (b"", 0))]
    for ino, (name, (data, mode)) in enumerate(entries, start=1):
        encoded = name.encode() + b"\0"
        fields = (ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(encoded), 0)
        out += b"070701" + b"".join(b"%08X" % value for value in fields) + encoded
        out += b"\0" * (-len(out) % 4)  # the name, then the data, each padded to 4 bytes
        out += data + b"\0" * (-len(data) % 4)
    return gzip.compress(bytes(out), compresslevel=1)


def run_in_guest(guest: Guest, image: Path, filter_program: bytes, workdir: Path) -> ProbeReport:
    """Boot `image` with the probe as /init and `filter_program` as /filter.bin; parse what it printed."""
    regular = 0o100755
    files = {"init": (build_probe(guest.cc, workdir).read_bytes(), regular), "filter.bin": (filter_program, 0o100644)}
    if guest.foreign_cc is not None:
        nop = workdir / "nop.c"
        nop.write_text("int main(void) { return 0; }\n")
        compile_static(guest.foreign_cc, nop, workdir / "foreign")
        files["foreign"] = ((workdir / "foreign").read_bytes(), regular)
    initramfs = workdir / f"{guest.name}.cpio.gz"
    initramfs.write_bytes(newc_archive(files))
    command = [
        *guest.kernel.qemu,
        *("-m", "512", "-nographic", "-no-reboot", "-nic", "none"),
        *("-kernel", str(image), "-initrd", str(initramfs)),
        *("-append", f"console={guest.kernel.console} panic=-1 quiet"),
    ]
    done = subprocess.run(command, capture_output=True, text=True, errors="replace", timeout=BOOT_TIMEOUT_S)
    return ProbeReport.parse(done.stdout + done.stderr)


def run_on_host(filter_program: bytes, workdir: Path) -> ProbeReport:
    """The same probe in this machine's kernel, as a plain process."""
    probe = build_probe("gcc", workdir)
    filter_file = workdir / "filter.bin"
    filter_file.write_bytes(filter_program)
    done = subprocess.run([str(probe), str(filter_file)], capture_output=True, text=True, timeout=60)
    return ProbeReport.parse(done.stdout + done.stderr)


def guest_filter(guest: Guest) -> bytes:
    return assemble(build_program(guest.abi))


def main(argv: list[str]) -> int:
    """`fetch`: download the pinned kernels; `run`: boot each and print what is wrong, if anything."""
    if argv[:1] not in (["fetch"], ["run"]):
        print("usage: python -m tests.envpool.seccomp_kernels fetch|run", file=sys.stderr)
        return 2
    failed = False
    for guest in GUESTS.values():
        image = kernel_image(guest, fetch=True)
        print(f"{guest.name}: kernel {image}")
        if argv[0] == "run" and image is not None:
            with tempfile.TemporaryDirectory() as tmp:
                problems = run_in_guest(guest, image, guest_filter(guest), Path(tmp)).problems()
            print(f"{guest.name}: " + ("; ".join(problems) if problems else "the filter works in its kernel"))
            failed |= bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
