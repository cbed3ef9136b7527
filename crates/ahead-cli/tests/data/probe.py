# What a program sees of the read family: bytes (as checksums), return
# values, file positions and errors, printed one line per call. The
# run_cli tests run it plainly and under every `ahead run` mode and
# compare the outputs.
import errno, hashlib, os, sys, threading

path, scratch = sys.argv[1], sys.argv[2]
out = []

def h(b):
    return hashlib.sha1(b).hexdigest()[:12]

def say(what, f):
    try:
        r = f()
        if isinstance(r, (bytes, bytearray)):
            r = "len=%d sum=%s" % (len(r), h(r))
        out.append("%s -> %s" % (what, r))
    except OSError as e:
        out.append("%s -> %s" % (what, errno.errorcode.get(e.errno, e.errno)))

fd = os.open(path, os.O_RDONLY)
pos = lambda: os.lseek(fd, 0, os.SEEK_CUR)
say("read 4096", lambda: os.read(fd, 4096))
say("pos", pos)
say("read 100000", lambda: os.read(fd, 100000))
say("pos", pos)
say("pread 8192 @ 1M", lambda: os.pread(fd, 8192, 1 << 20))
say("pos unchanged", pos)
say("pread @ -1", lambda: os.pread(fd, 10, -1))
say("pread past end", lambda: os.pread(fd, 10, 1 << 40))
say("seek end-5000", lambda: os.lseek(fd, -5000, os.SEEK_END))
say("read to end", lambda: os.read(fd, 1 << 20))
say("read at end", lambda: os.read(fd, 10))
say("seek 12345", lambda: os.lseek(fd, 12345, os.SEEK_SET))
bufs = [bytearray(1000), bytearray(7000)]
say("readv", lambda: os.readv(fd, bufs))
say("readv bytes", lambda: h(bytes(bufs[0]) + bytes(bufs[1])))
say("pos", pos)
say("preadv @ 3M", lambda: os.preadv(fd, bufs, 3 << 20))
say("preadv bytes", lambda: h(bytes(bufs[0]) + bytes(bufs[1])))
say("pos", pos)
# A backward walk, as tac does.
o = os.fstat(fd).st_size
sums = hashlib.sha1()
while o > 0:
    o = max(0, o - 8192)
    os.lseek(fd, o, os.SEEK_SET)
    sums.update(os.read(fd, 8192))
say("backward walk", lambda: sums.hexdigest()[:12])
say("pos", pos)
# A strided walk with pread.
sums = hashlib.sha1()
for i in range(0, os.fstat(fd).st_size, 65536):
    sums.update(os.pread(fd, 4096, i))
say("strided walk", lambda: sums.hexdigest()[:12])
# dup shares the position; reads through both.
d = os.dup(fd)
os.lseek(fd, 777, os.SEEK_SET)
say("read via dup", lambda: os.read(d, 1000))
say("pos via original", pos)
os.close(d)
say("read closed dup", lambda: os.read(d, 10))
# Threads reading one descriptor with pread.
res = [None] * 4
def worker(i):
    s = hashlib.sha1()
    for j in range(i, 256, 4):
        s.update(os.pread(fd, 4096, j * 16384))
    res[i] = s.hexdigest()[:12]
ts = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
[t.start() for t in ts]
[t.join() for t in ts]
say("threads", lambda: ",".join(res))
# A fork: the child walks the file backwards through the inherited
# descriptor and reports through a pipe; the parent reads on meanwhile.
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(r)
    s = hashlib.sha1()
    o = os.fstat(fd).st_size
    while o > 0:
        o = max(0, o - 16384)
        s.update(os.pread(fd, 16384, o))
    os.write(w, s.hexdigest()[:12].encode())
    os._exit(0)
os.close(w)
say("parent pread after fork", lambda: os.pread(fd, 4096, 123456))
say("child's backward walk", lambda: os.read(r, 100))
os.close(r)
say("child exit", lambda: os.waitpid(pid, 0)[1])
# Not regular files: a directory, a pipe.
dfd = os.open(scratch, os.O_RDONLY | os.O_DIRECTORY)
say("read a directory", lambda: os.read(dfd, 10))
os.close(dfd)
r, w = os.pipe()
os.write(w, b"through a pipe")
say("read a pipe", lambda: os.read(r, 100))
os.close(r); os.close(w)
# Writes: position, append, pwrite, copy_file_range.
dst = os.path.join(scratch, "probe.out")
wfd = os.open(dst, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
say("write", lambda: os.write(wfd, b"x" * 10000))
say("pwrite @ 20000", lambda: os.pwrite(wfd, b"y" * 5000, 20000))
say("wpos", lambda: os.lseek(wfd, 0, os.SEEK_CUR))
say("writev", lambda: os.writev(wfd, [b"a" * 100, b"b" * 200]))
say("wpos", lambda: os.lseek(wfd, 0, os.SEEK_CUR))
say("pwrite @ -1", lambda: os.pwrite(wfd, b"z", -1))
os.lseek(fd, 4096, os.SEEK_SET)
say("copy_file_range pos", lambda: os.copy_file_range(fd, wfd, 300000))
say("src pos", pos)
say("dst pos", lambda: os.lseek(wfd, 0, os.SEEK_CUR))
say("copy_file_range offsets", lambda: os.copy_file_range(fd, wfd, 50000, 2 << 20, 1 << 20))
say("src pos unchanged", pos)
say("copy_file_range past end", lambda: os.copy_file_range(fd, wfd, 100, 1 << 40, 0))
say("copy_file_range within one file, overlapping", lambda: os.copy_file_range(wfd, wfd, 1000, 0, 500))
say("copy_file_range within one file", lambda: os.copy_file_range(wfd, wfd, 1000, 0, 400000))
os.close(wfd)
with open(dst, "rb") as f:
    say("written file", lambda: f.read())
app = os.open(dst, os.O_WRONLY | os.O_APPEND)
say("append", lambda: os.write(app, b"tail"))
say("append pos", lambda: os.lseek(app, 0, os.SEEK_CUR))
say("copy_file_range to O_APPEND", lambda: os.copy_file_range(fd, app, 100))
# Bad pointers, through the C library as a C program would pass them:
# the kernel answers EFAULT, and so must every hook.
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.copy_file_range.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
libc.readv.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
libc.preadv.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_long]
def cerr(r):
    e = ctypes.get_errno()
    return "%d %s" % (r, errno.errorcode.get(e, e) if r < 0 else "")
say("readv of a bad iovec pointer", lambda: cerr(libc.readv(fd, 16, 1)))
say("preadv of a bad iovec pointer", lambda: cerr(libc.preadv(fd, 16, 2, 0)))
wr = os.open(dst, os.O_WRONLY)
say("copy_file_range, bad offset pointer", lambda: cerr(libc.copy_file_range(fd, 16, wr, None, 100, 0)))
os.close(wr)
os.close(app)
os.close(fd)
say("read closed", lambda: os.read(fd, 10))
say("read bad fd", lambda: os.read(-5, 10))
print("\n".join(out))
