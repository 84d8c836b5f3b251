/* backend_fncall.c — the "fncall" backend: stateless calls on warm sandboxes
 * of an image.
 *
 * A *command* call runs in a sandbox of the container library
 * (sandbox/container/strata_sandbox.h, the container backend's runtime):
 * overlay root over the image, mount/pid/uts/ipc/net/cgroup namespaces,
 * masked /proc and /sys, dropped capabilities, no_new_privs, seccomp, and
 * its own memory, pids and cpu cgroup, strata-agent as pid 1. A pool per
 * (image root, network, limits) holds started sandboxes (sbx_create done,
 * the agent waiting); a call takes one, runs one exec in it with the
 * library's non-blocking exec op driven from sandboxd's loop (as the
 * container backend does), answers, and then destroys it (that is the
 * cleanup between calls: nothing a call does survives it). Filler threads
 * make the replacements off the loop (sbx_create waits for the agent's
 * START reply); an empty pool creates inline.
 *
 * A *Python* call (as root) runs in a fresh process forked from a warm
 * template (see py_boot): a python3 that the container library spawned as
 * a worker (sandbox/container/worker.h: new mount, pid, uts, ipc and
 * (network "none") net namespaces, the image root read-only, fresh /tmp,
 * /dev, /proc and a read-only /sys with the library's masks, loopback up,
 * its own pids and memory cgroups with a cgroup for its call processes
 * beside, the cpu limit each call's sandbox's, written before the call; no
 * capabilities but the two its call processes' set-up needs, no_new_privs,
 * the library's seccomp filter handed over for them). Python as another
 * user is a command call of python3 -c.
 *
 * Pools grow with demand (the calls of the last second), shrink back after
 * 10 s without calls, and are refilled after the calls returned. What
 * fncall cannot do is refused up front with -EOPNOTSUPP: files that
 * persist, pause and resume, interactive stdin.
 *
 * Invariants:
 *  1. A warm sandbox or worker is in at most one place: a pool's idle list
 *     or a running call, never both; a cmd_pool's idle list and counters
 *     are changed under fb->mu (the filler threads push, the loop takes).
 *  2. A command call's sandbox is destroyed when the call ends, whatever
 *     the end (exit, cancel, deadline); its sink is called at most once.
 *  3. A cmd_pool is freed only on the loop, with no create in flight for it.
 *  4. Idle interpreters die with sandboxd (PDEATHSIG and EOF on their
 *     control pipe), warm sandboxes when their agent's stream closes; a
 *     restarted sandboxd starts new pools.
 *  5. A template runs a call only once that call's cpu limit is in its
 *     cpu cgroup; its call processes run a caller's code only with every
 *     capability dropped, no_new_privs and the seccomp filter loaded (else
 *     they exit). */
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fs/cleanup.h"
#include "sandbox/sandboxd/loop.h"
#include "sandbox/sandboxd/sandboxd.h"

#ifdef STRATA_HAVE_CONTAINER
#include "sandbox/container/strata_sandbox.h"
#include "sandbox/container/worker.h"
#endif

#define POOL_MAX 32
#define DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

/* A template (py_boot): the library's worker and its pipes. */
struct fn_worker {
#ifdef STRATA_HAVE_CONTAINER
	struct sbx_worker sw; /* pid, pidfd (-1 once reaped), cgroups, cpu limit */
#endif
	int ctl, in, out, err;
	int calls; /* calls served */
	int mntns; /* holds its mount namespace: see ns_release */
	struct fn_backend *fb;
	struct fn_worker *next;
};

#define PY_MAX_CALLS 1000		 /* a warm interpreter is replaced after this many */
#define PY_READY_MEMORY (16LL << 20)	 /* a ready call process, in the call cgroup */
#define PY_TEMPLATE_MEMORY (128LL << 20) /* the template's allowance beside */
#define PY_TEMPLATE_PIDS 8
#define PY_READY 4 /* call processes a template keeps ready (py_boot) */
/* What a ready call process copies ahead at most (py_boot's prefault): 8 MiB,
 * within its PY_READY_MEMORY. */
#define PY_PREFAULT_MAX_S "8388608"

/* A call on a warm interpreter (see py_boot). */
struct py_call {
	struct fn_backend *fb;
	struct fn_pool *pool;
	struct fn_worker *w;
	struct sbd_watch w_out, w_err, w_ctl, w_pid, w_timer;
	int timer_fd;
	struct sbd_exec_sink sink;
	uint64_t cap, forwarded;
	struct sbd_exit ex;
	int64_t start_us;
	uint8_t resp[64];
	size_t resp_len;
	int ns_fd;	      /* the call process's mount namespace, closed off the loop after */
	struct py_call *next; /* in fb->calls */
};

/* A pool of warm interpreters of one image and network. */
struct fn_pool {
	const struct sbd_image *img; /* the key (images.h), with rootfs when NULL */
	char *rootfs;
	bool net_host;
	int64_t memory_mb, pids;   /* each call's limits (the call cgroup's) */
	char keep[SBD_ID_LEN + 1]; /* keep_state: the one sandbox it serves, else "" */
	struct fn_worker *idle;
	int nidle, target, uses, peak;
	int64_t last_use_ms;
	bool refill_queued;
	struct fn_backend *fb;
	struct fn_pool *next;
};

/* A warm library sandbox in a cmd_pool's idle list. */
struct cmd_box {
	struct sbx *s;
	struct cmd_box *next;
};

/* Warm sandboxes for command calls: one pool per image root, network and
 * limits (a sandbox's limits are set when it is made). Under fb->mu: idle,
 * nidle, creating, target, err, last_call_ms (the filler threads read and
 * fill them). */
struct cmd_pool {
	const struct sbd_image *img; /* the key (images.h), with rootfs when NULL */
	char *rootfs;
	bool net_host;
	int64_t memory_mb, pids, disk_mb;
	uint32_t cpu_millis;
	struct cmd_box *idle;
	int nidle, creating, target, uses;
	int err;	      /* the last create failed: not refilled until the next call */
	int64_t last_use_ms;  /* made or called (the loop's) */
	int64_t last_call_ms; /* the last call, 0 = none yet */
	struct cmd_pool *next;
};

#define FILL_THREADS 2
/* Pools without a call in the last 10 s are kept warm only while all pools
 * together hold fewer sandboxes than this: every distinct set of limits
 * makes a pool, and limits are the client's. */
#define WARM_IDLE_MAX 64
#define ACTIVE_MS 10000

struct fn_backend {
	struct sbd_backend b;
	/* The container library's workers (the templates): their cgroups below
	 * strata-fncall, the seccomp program; NULL: Python calls are refused
	 * (py_why says why). */
	struct sbx_workers *ws;
	struct strata_err py_why; /* Python calls as root refused: why */
	int closer_fd;		  /* write end: fds for the closer thread, or -1 */
	pthread_t closer;
	int pool_min;
	struct fn_pool *pools;	  /* warm interpreters */
	struct py_call *calls;	  /* in flight on warm interpreters */
	struct sbx_runtime *rt;	  /* the container backend's; NULL: no command calls */
	struct strata_err rt_why; /* why there is none */
	struct cmd_pool *cpools;  /* warm sandboxes for command calls */
	struct cmd_call *cmds;	  /* command calls in flight */
	pthread_mutex_t mu;	  /* cpools' idle lists and counters */
	pthread_cond_t fill;	  /* wakes the filler threads */
	pthread_t fillers[FILL_THREADS];
	int nfillers;
	bool stop;
};

/* The template: a warm python3 that has imported nothing of any caller and
 * never runs a caller's code, spawned as a worker of the container library
 * (template_spawn) with PY_TEMPLATE_CAPS and no_new_privs. It keeps a call
 * process ready: forked into a
 * new pid namespace (its pid 1), which joins the call cgroups (fds 7 and 8,
 * v1), unshares its mount and IPC namespaces, mounts a fresh tmpfs on /tmp
 * and a fresh /proc with the library's masks (argv[2], from sbx_masks.h),
 * drops the bounding set and every capability, sets no_new_privs, loads the
 * library's seccomp filter (fd 6), says "r" and waits on a pipe. A call is
 * a frame (u32 LE length, JSON {source, env, cwd, stdin}) on fd 3; the
 * template hands it to the ready process, whose output goes to fds 1 and 2
 * as it is printed. When the call's code is done, its process kills what
 * else runs in its pid namespace, reaps it and exits with the call's code;
 * the template answers {exit_code[, signal, oom]} on fd 3 once it reaped it
 * (nothing of the call can write any more), passing the call's mount
 * namespace along (SCM_RIGHTS): sandboxd closes it off the loop, so the
 * exit never waits for the namespace's teardown. argv[1] "1" (keep_state):
 * one call process serves all the calls of its sandbox, its globals kept;
 * it answers each by a byte on its result pipe. The memory cgroup's
 * oom_kill count (fd 9) tells an OOM kill from another SIGKILL. */
static const char py_boot[] =
    "import os,sys,json,io,struct,base64,traceback,socket,ctypes,gc\n"
    "L=ctypes.CDLL(None,use_errno=True)\n"
    "U=ctypes.c_ulong\n"
    "KEEP=sys.argv[1]=='1'\n"
    "M=json.loads(sys.argv[2])\n"
    "def die(m):\n"
    "    os.write(2,('strata-fncall: %s\\n'%m).encode()); os._exit(126)\n"
    "def ck(r,m):\n"
    "    if r<0: die('%s: %s'%(m,os.strerror(ctypes.get_errno())))\n"
    "def rd(fd,n):\n"
    "    b=b''\n"
    "    while len(b)<n:\n"
    "        c=os.read(fd,n-len(b))\n"
    "        if not c: return None\n"
    "        b+=c\n"
    "    return b\n"
    "def frame(fd):\n"
    "    h=rd(fd,4)\n"
    "    return h and rd(fd,struct.unpack('<I',h)[0])\n"
    "def isfd(f):\n"
    "    try: os.fstat(f); return True\n"
    "    except OSError: return False\n"
    "F=b''\n"
    "while True:\n"
    "    c=os.read(6,65536)\n"
    "    if not c: break\n"
    "    F+=c\n"
    "os.close(6)\n"
    "CG=[f for f in (7,8) if isfd(f)]\n"
    "OOM=9 if isfd(9) else -1\n"
    "S=socket.socket(fileno=3)\n"
    "PIDNS=os.open('/proc/self/ns/pid',os.O_RDONLY|os.O_CLOEXEC)\n"
    "class FP(ctypes.Structure): _fields_=[('n',ctypes.c_ushort),('p',ctypes.c_void_p)]\n"
    "FB=ctypes.create_string_buffer(F,len(F))\n"
    "def e(x): return x.encode() if x else None\n"
    "def mnt(s,d,t,f,o=None): ck(L.mount(e(s),e(d),e(t),U(f),e(o)),'mount '+d)\n"
    "def ooms():\n"
    "    if OOM<0: return 0\n"
    "    for l in os.pread(OOM,4096,0).decode().splitlines():\n"
    "        k,_,v=l.partition(' ')\n"
    "        if k=='oom_kill': return int(v)\n"
    "    return 0\n"
    "def prep():\n"
    "    for f in CG: os.write(f,b'0'); os.close(f)\n"
    "    for a,n in PF: L.madvise(U(a),U(n),23)\n"
    "    ck(L.unshare(0x20000|0x08000000),'unshare the mount and IPC namespaces')\n"
    "    if os.path.isdir('/tmp'): mnt('tmpfs','/tmp','tmpfs',6,'size=64m,mode=1777')\n"
    "    mnt('proc','/proc','proc',14)\n"
    "    for f in M[0]:\n"
    "        if os.path.exists(f): mnt('/dev/null',f,None,4096)\n"
    "    m=None\n"
    "    for d in M[1]:\n"
    "        if os.path.isdir(d):\n"
    "            if m: mnt(m,d,None,4096)\n"
    "            else: mnt('tmpfs',d,'tmpfs',15,'mode=555'); m=d\n"
    "    for d in M[2]:\n"
    "        if os.path.exists(d): mnt(d,d,None,20480); mnt(None,d,None,4143)\n"
    "    try: open('/proc/self/oom_score_adj','w').write('0')\n"
    "    except OSError: pass\n"
    "    c=0\n"
    "    while L.prctl(24,U(c),U(0),U(0),U(0))==0: c+=1\n"
    "    ck(L.capset((ctypes.c_uint32*2)(0x20080522,0),(ctypes.c_uint32*6)()),'drop "
    "capabilities')\n"
    "    ck(L.prctl(38,U(1),U(0),U(0),U(0)),'no_new_privs')\n"
    "    ck(L.prctl(22,U(2),ctypes.byref(FP(len(F)//8,ctypes.addressof(FB))),U(0),U(0)),'load the "
    "seccomp filter')\n"
    "def written():\n"
    "    w=[]; t=0\n"
    "    pm=os.open('/proc/self/pagemap',os.O_RDONLY|os.O_CLOEXEC)\n"
    "    for l in open('/proc/self/maps').read().splitlines():\n"
    "        a=l.split()\n"
    "        if a[1][:2]!='rw' or a[1][3]!='p' or len(a)>5 and a[5][:2]=='[v': continue\n"
    "        lo,hi=(int(x,16) for x in a[0].split('-'))\n"
    "        b=os.pread(pm,(hi-lo)>>9,lo>>9)\n"
    "        for i,(v,) in enumerate(struct.iter_unpack('<Q',b)):\n"
    "            if v>>56&0x81!=0x81 or t>=PF_MAX: continue\n"
    "            x=lo+(i<<12); t+=4096\n"
    "            if w and w[-1][0]+w[-1][1]==x: w[-1][1]+=4096\n"
    "            else: w.append([x,4096])\n"
    "    os.close(pm)\n"
    "    return w\n"
    "def run(r,g):\n"
    "    os.environ.clear()\n"
    "    os.environ.update(dict(x.split('=',1) for x in r['env']))\n"
    "    code=0\n"
    "    sys.stdin=io.TextIOWrapper(io.BytesIO(base64.b64decode(r.get('stdin') or '')))\n"
    "    sys.argv=['-c']\n"
    "    so,se=sys.stdout,sys.stderr\n"
    "    try:\n"
    "        os.chdir(r['cwd'])\n"
    "        exec(compile(r['source'],'<fncall>','exec'),g)\n"
    "    except SystemExit as x:\n"
    "        c=x.code\n"
    "        code=0 if c is None else c if isinstance(c,int) else (print(c,file=sys.stderr) or 1)\n"
    "    except BaseException:\n"
    "        traceback.print_exc(); code=1\n"
    "    for f in (sys.stdout,sys.stderr,so,se):\n"
    "        try: f.flush()\n"
    "        except Exception: pass\n"
    "    sys.stdout,sys.stderr=so,se\n"
    "    return code&255\n"
    "def reap():\n"
    "    try: os.kill(-1,9)\n"
    "    except OSError: pass\n"
    "    while True:\n"
    "        try: os.waitpid(-1,0)\n"
    "        except ChildProcessError: return\n"
    "        except OSError: pass\n"
    "def child(r,w,x,P):\n"
    "    prep()\n"
    "    os.write(w,b'r'); os.close(w)\n"
    "    g={'__name__':'__main__','__builtins__':__builtins__}\n"
    "    while True:\n"
    "        q=frame(r)\n"
    "        if q is None: os._exit(0)\n"
    "        code=run(json.loads(q),g)\n"
    "        if P: os.write(x,json.dumps(written()).encode()); os._exit(0)\n"
    "        reap()\n"
    "        if not KEEP: os._exit(code)\n"
    "        os.write(x,bytes([code]))\n"
    "ready=[]\n"
    "def spawn(P=False):\n"
    "    gc.freeze()\n"
    "    r,w=os.pipe(); rr,rw=os.pipe(); xr,xw=os.pipe()\n"
    "    ck(L.setns(PIDNS,0x20000000),'setns'); ck(L.unshare(0x20000000),'unshare the pid "
    "namespace')\n"
    "    pid=os.fork()\n"
    "    if pid==0:\n"
    "        try:\n"
    "            keep=sorted({0,1,2,r,rw,xw,*CG}); lo=0\n"
    "            for k in keep:\n"
    "                if k>lo: os.closerange(lo,k)\n"
    "                lo=k+1\n"
    "            os.closerange(lo,1<<20)\n"
    "            child(r,rw,xw,P)\n"
    "        except BaseException as x: die('prepare a call: %r'%x)\n"
    "        os._exit(126)\n"
    "    for f in (r,rw,xw): os.close(f)\n"
    "    c=[pid,w,rr,xr,-1]\n"
    "    return c\n"
    "def drop(c):\n"
    "    for f in c[1:]:\n"
    "        if f>=0:\n"
    "            os.close(f)\n"
    "def answer(d,ns):\n"
    "    a=json.dumps(d).encode()\n"
    "    socket.send_fds(S,[struct.pack('<I',len(a))+a],[ns] if ns>=0 else [])\n"
    "def start(c):\n"
    "    if os.read(c[2],1)!=b'r': die('a call process did not start')\n"
    "    ns=os.open('/proc/%d/ns/mnt'%c[0],os.O_RDONLY|os.O_CLOEXEC)\n"
    "    socket.send_fds(S,[b'\\0\\0\\0\\0'],[ns]); os.close(ns)\n"
    "def probe():\n"
    "    c=spawn(True)\n"
    "    if os.read(c[2],1)!=b'r': die('a call process did not start')\n"
    "    "
    "q=json.dumps({'source':'pass','env':['PATH=/usr/bin:/bin'],'cwd':'/','stdin':''}).encode()\n"
    "    os.write(c[1],struct.pack('<I',len(q))+q)\n"
    "    b=b''\n"
    "    while True:\n"
    "        k=os.read(c[3],65536)\n"
    "        if not k: break\n"
    "        b+=k\n"
    "    os.waitpid(c[0],0); drop(c)\n"
    "    try: return [(int(a),int(n)) for a,n in json.loads(b)]\n"
    "    except Exception: return []\n"
    "cur=None\n"
    "PF=[]; PF_MAX=" PY_PREFAULT_MAX_S "\n"
    "gc.collect(); gc.freeze()\n"
    "if not KEEP: PF=probe()\n"
    "while True:\n"
    "    while not KEEP and len(ready)<4: ready.append(spawn())\n"
    "    q=frame(3)\n"
    "    if q is None: os._exit(0)\n"
    "    h=struct.pack('<I',len(q))\n"
    "    o=ooms()\n"
    "    if KEEP:\n"
    "        if cur is None: cur=spawn(); start(cur)\n"
    "        os.write(cur[1],h+q)\n"
    "        b=os.read(cur[3],1)\n"
    "        if b: answer({'exit_code':b[0]},-1); continue\n"
    "        c=cur; cur=None\n"
    "    else:\n"
    "        c=ready.pop(0); start(c)\n"
    "        os.write(c[1],h+q)\n"
    "    s=os.waitstatus_to_exitcode(os.waitpid(c[0],0)[1])\n"
    "    drop(c)\n"
    "    d={'exit_code':s&255} if s>=0 else {'exit_code':-1,'signal':-s,'oom':ooms()>o}\n"
    "    answer(d,-1)\n";

/* ---- releasing mount namespaces off the loop ------------------------------------
 *
 * The last reference to a mount namespace unmounts its tree, and the kernel
 * then waits for an RCU grace period (milliseconds). A worker that held the
 * last reference would pay that in its exit, before its pidfd reports it:
 * on every call's critical path. So sandboxd holds each worker's mount
 * namespace open (/proc/<pid>/ns/mnt) and, once the call has been answered,
 * hands the fd to this thread, which closes it. */

static void *closer_main(void *arg)
{
	int rfd = (int)(intptr_t)arg, fd;
	while (read(rfd, &fd, sizeof(fd)) == sizeof(fd))
		close(fd);
	close(rfd);
	return NULL;
}

static void closer_start(struct fn_backend *fb)
{
	int p[2];
	fb->closer_fd = -1;
	if (pipe2(p, O_CLOEXEC) < 0)
		return;
	if (pthread_create(&fb->closer, NULL, closer_main, (void *)(intptr_t)p[0]) != 0) {
		close(p[0]);
		close(p[1]);
		return;
	}
	fb->closer_fd = p[1];
}

static void ns_release(struct fn_backend *fb, int fd)
{
	if (fd < 0)
		return;
	if (fb->closer_fd < 0 || write(fb->closer_fd, &fd, sizeof(fd)) != sizeof(fd))
		close(fd);
}

static void closer_stop(struct fn_backend *fb)
{
	if (fb->closer_fd < 0)
		return;
	close(fb->closer_fd);
	pthread_join(fb->closer, NULL);
	fb->closer_fd = -1;
}

/* ---- pools -------------------------------------------------------------------- */

/* The capabilities a template keeps (bounding, permitted, effective): what
 * its call processes' set-up needs before they drop every one (py_boot's
 * prep): CAP_SYS_ADMIN (unshare, setns, mount) and CAP_SETPCAP (to empty
 * their bounding set). None of root's others: sandbox/sandboxd/README.md,
 * "Where the privileges are dropped". */
#define PY_TEMPLATE_CAPS ((1ull << CAP_SYS_ADMIN) | (1ull << CAP_SETPCAP))

static void worker_free(struct fn_worker *w)
{
	int fds[] = {w->ctl, w->in, w->out, w->err};
#ifdef STRATA_HAVE_CONTAINER
	sbx_worker_free(&w->sw); /* killed and reaped unless a call reaped it */
#endif
	ns_release(w->fb, w->mntns); /* -1 when a call took it over */
	for (size_t i = 0; i < ARRAY_SIZE(fds); i++)
		if (fds[i] >= 0)
			close(fds[i]);
	free(w);
}

#ifdef STRATA_HAVE_CONTAINER
static int worker_pidfd(const struct fn_worker *w)
{
	return w->sw.pidfd;
}

/* A template for pool p, as a worker of the container library with p's
 * limits: its call processes share the call cgroup (the library's
 * children cgroup: the sandbox's pids and memory, plus a ready call
 * process's allowance for each of PY_READY), and the template's own
 * cgroup holds that plus its own allowance. */
static int template_spawn(struct fn_pool *p, int in, int out, int err, int ctl,
			  struct sbx_worker *ret)
{
	int64_t call_pids = p->pids + PY_READY,
		call_mem = (p->memory_mb << 20) + PY_READY * PY_READY_MEMORY;
	char *env[] = {"PATH=" DEFAULT_PATH, "LANG=C.UTF-8", NULL};
	char *argv[] = {"python3",
			"-I",
			"-c",
			(char *)py_boot,
			p->keep[0] ? "1" : "0",
			(char *)sbx_workers_proc_masks(p->fb->ws),
			NULL};
	int fds[] = {in, out, err, ctl};
	struct sbx_worker_config cfg = {
	    .rootfs = p->rootfs,
	    .path = "/usr/bin/python3",
	    .argv = argv,
	    .envp = env,
	    .label = "strata-fncall",
	    .network = p->net_host ? SBX_NET_HOST : SBX_NET_NONE,
	    .fds = fds,
	    .nfds = ARRAY_SIZE(fds),
	    .caps_keep = PY_TEMPLATE_CAPS,
	    .seccomp_deferred = true, /* its call processes load it after their mounts */
	    /* The template's memory limit covers its calls' cgroup too: the
	     * template is not the OOM killer's choice there (the calls' own
	     * cgroup is where an OOM of a call happens). */
	    .oom_score_adj = -1000,
	    .memory_bytes = (uint64_t)(call_mem + PY_TEMPLATE_MEMORY),
	    .pids_max = (uint32_t)(call_pids + PY_TEMPLATE_PIDS),
	    .children = true,
	    .children_memory_bytes = (uint64_t)call_mem,
	    .children_pids_max = (uint32_t)call_pids,
	};
	return sbx_worker_spawn(p->fb->ws, &cfg, ret);
}
#else
static int worker_pidfd(const struct fn_worker *w)
{
	return -1;
}
#endif

static int worker_spawn(struct fn_pool *p, struct fn_worker **ret)
{
	int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1}, ctl[2] = {-1, -1};
	struct fn_worker *w = calloc(1, sizeof(*w));
	int r = 0;
	if (!w || pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0 ||
	    pipe2(err, O_CLOEXEC) < 0 ||
	    socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ctl) < 0)
		r = -errno ?: -ENOMEM;
#ifdef STRATA_HAVE_CONTAINER
	if (r == 0)
		r = template_spawn(p, in[0], out[1], err[1], ctl[0], &w->sw);
#else
	if (r == 0)
		r = -ENODEV;
#endif
	int child_ends[] = {in[0], out[1], err[1], ctl[0]};
	for (size_t i = 0; i < 4; i++)
		if (child_ends[i] >= 0)
			close(child_ends[i]);
	if (r < 0) {
		int ours[] = {in[1], out[0], err[0], ctl[1]};
		for (size_t i = 0; i < 4; i++)
			if (ours[i] >= 0)
				close(ours[i]);
		free(w);
		return r;
	}
	w->ctl = ctl[1];
	w->in = in[1];
	w->out = out[0];
	w->err = err[0];
	w->fb = p->fb;
	char nsp[64] = "";
#ifdef STRATA_HAVE_CONTAINER
	snprintf(nsp, sizeof(nsp), "/proc/%d/ns/mnt", (int)w->sw.pid);
#endif
	w->mntns = open(nsp, O_RDONLY | O_CLOEXEC);
	*ret = w;
	return 0;
}

static bool worker_alive(const struct fn_worker *w)
{
	struct pollfd pf = {.fd = worker_pidfd(w), .events = POLLIN};
	return pf.fd >= 0 && poll(&pf, 1, 0) == 0;
}

/* Whether a pool of image img (NULL: known by its root only) with root
 * rootfs serves sb: image handles are compared, paths only without one. */
static bool same_image(const struct sbd_image *img, const char *rootfs,
		       const struct sbd_sandbox *sb)
{
	return img == sb->img && (img || !strcmp(rootfs, sb->rootfs));
}

/* The pool of sb's image, network and limits; a keep_state sandbox has one
 * of its own. */
static struct fn_pool *pool_get(struct fn_backend *fb, const struct sbd_sandbox *sb)
{
	const char *keep = sb->keep_state ? sb->id : "";
	for (struct fn_pool *p = fb->pools; p; p = p->next)
		if (p->net_host == sb->net_host && same_image(p->img, p->rootfs, sb) &&
		    p->memory_mb == sb->memory_mb && p->pids == sb->pids && !strcmp(p->keep, keep))
			return p;
	struct fn_pool *p = calloc(1, sizeof(*p));
	if (!p || !(p->rootfs = strdup(sb->rootfs))) {
		free(p);
		return NULL;
	}
	p->img = sb->img;
	p->net_host = sb->net_host;
	p->memory_mb = sb->memory_mb;
	p->pids = sb->pids;
	snprintf(p->keep, sizeof(p->keep), "%s", keep);
	p->target = p->keep[0] ? 1 : fb->pool_min;
	p->fb = fb;
	p->last_use_ms = sbd_now_ms();
	p->next = fb->pools;
	fb->pools = p;
	return p;
}

/* The interpreters of p in calls. A pool's target counts them with the
 * idle ones: a call takes its interpreter for its duration and gives it
 * back, so booting a replacement when one is taken (what an idle-only
 * count did at every call that left fewer idle than the target: a python3
 * start, ~100 ms of CPU on this VM, and one killed again at the next tick)
 * is only needed when all are busy. */
static int pool_busy(const struct fn_pool *p)
{
	int n = 0;
	for (struct py_call *c = p->fb->calls; c; c = c->next)
		n += c->pool == p;
	return n;
}

static void pool_refill(void *ctx)
{
	struct fn_pool *p = ctx;
	p->refill_queued = false;
	int busy = pool_busy(p);
	for (int i = 0; i < 4 && p->nidle + busy < p->target; i++) {
		struct fn_worker *w;
		if (worker_spawn(p, &w) < 0)
			return;
		w->next = p->idle;
		p->idle = w;
		p->nidle++;
	}
	if (p->nidle + busy < p->target && sbd_defer(p->fb->b.loop, pool_refill, p) == 0)
		p->refill_queued = true;
}

static void pool_kick(struct fn_pool *p)
{
	if (!p->refill_queued && p->nidle + pool_busy(p) < p->target &&
	    sbd_defer(p->fb->b.loop, pool_refill, p) == 0)
		p->refill_queued = true;
}

static void discard_pending(int fd)
{
	char b[4096];
	while (read(fd, b, sizeof(b)) > 0)
		;
}

/* Kills idle workers beyond keep, those idle the longest first (the list's
 * tail): the head is the worker a call just gave back, which a caller may
 * still be looking at. */
static void pool_trim(struct fn_pool *p, int keep)
{
	while (p->nidle > keep && p->idle) {
		struct fn_worker **pp = &p->idle;
		while ((*pp)->next)
			pp = &(*pp)->next;
		worker_free(*pp);
		*pp = NULL;
		p->nidle--;
	}
}

/* Takes an idle live worker or spawns one. */
static int pool_take(struct fn_pool *p, struct fn_worker **ret)
{
	if (p->keep[0] && !p->idle)
		for (struct py_call *c = p->fb->calls; c; c = c->next)
			if (c->pool == p)
				return -EBUSY; /* its one interpreter is in a call */
	p->uses++;
	p->last_use_ms = sbd_now_ms();
	if (!p->idle && p->target < POOL_MAX && !p->keep[0])
		p->target++;
	while (p->idle) {
		/* The one idle the longest (the list's tail): a template forks the
		 * replacement of the call process a call used after answering it
		 * (~10 ms on this VM), and the one a call just gave back, the head,
		 * would make the next call wait for that fork. */
		struct fn_worker **pp = &p->idle;
		while (!p->keep[0] && (*pp)->next)
			pp = &(*pp)->next;
		struct fn_worker *w = *pp;
		*pp = w->next;
		p->nidle--;
		if (worker_alive(w)) {
			if (w->calls) { /* a warm interpreter: drop stray output */
				discard_pending(w->out);
				discard_pending(w->err);
			}
			*ret = w;
			pool_kick(p);
			return 0;
		}
		worker_free(w);
	}
	pool_kick(p);
	return worker_spawn(p, ret);
}

/* ---- requests --------------------------------------------------------------- */

static int parse_user(const char *rootfs, const char *user, int64_t *uid, int64_t *gid)
{
	*uid = *gid = 0;
	if (!user || !user[0] || !strcmp(user, "root"))
		return 0;
	if (!strcmp(user, "nobody")) {
		*uid = *gid = 65534;
		return 0;
	}
	char *end;
	long u = strtol(user, &end, 10);
	if (end != user && (*end == 0 || *end == ':')) {
		*uid = u;
		*gid = *end == ':' ? strtol(end + 1, NULL, 10) : u;
		return 0;
	}
	char path[4200], line[512];
	snprintf(path, sizeof(path), "%s/etc/passwd", rootfs);
	FILE *f = fopen(path, "re");
	size_t n = strlen(user);
	while (f && fgets(line, sizeof(line), f)) {
		long lu, lg;
		if (!strncmp(line, user, n) && line[n] == ':' &&
		    sscanf(line + n, ":%*[^:]:%ld:%ld:", &lu, &lg) == 2) {
			*uid = lu;
			*gid = lg;
			fclose(f);
			return 0;
		}
	}
	if (f)
		fclose(f);
	return -ENOENT;
}

static int write_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t k = write(fd, p, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && errno == EAGAIN) { /* a warm interpreter still reading */
			struct pollfd pf = {.fd = fd, .events = POLLOUT};
			if (poll(&pf, 1, 5000) <= 0)
				return -ETIMEDOUT;
			continue;
		}
		if (k < 0)
			return -errno;
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

/* A sandbox's cpu limit in thousandths of a core, rounded: at least 10,
 * the kernel's smallest quota (1 ms per 100 ms period). */
static uint32_t cpu_millis_of(const struct sbd_sandbox *sb)
{
	double m = sb->cpu * 1000 + 0.5;
	return m < 10 ? 10 : m > 1024000 ? 1024000 : (uint32_t)m;
}

static bool has_python(const char *rootfs)
{
	char p[4200];
	snprintf(p, sizeof(p), "%s/usr/bin/python3", rootfs);
	return access(p, X_OK) == 0;
}

/* ---- calls on warm interpreters -------------------------------------------- */

static int64_t mono_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void py_forward(struct py_call *c, int stream, bool final)
{
	int fd = stream == 1 ? c->w->out : c->w->err;
	uint64_t *count = stream == 1 ? &c->ex.stdout_bytes : &c->ex.stderr_bytes;
	char buf[65536];
	for (int i = 0; i < 64; i++) {
		ssize_t n = read(fd, buf, sizeof(buf));
		if (n <= 0)
			return;
		*count += (uint64_t)n;
		uint64_t room = c->cap > c->forwarded ? c->cap - c->forwarded : 0;
		size_t fwd = (uint64_t)n < room ? (size_t)n : (size_t)room;
		if (fwd < (size_t)n)
			c->ex.truncated = true;
		if (fwd) {
			c->forwarded += fwd;
			c->sink.output(c->sink.ctx, stream, buf, fwd);
		}
		if (!final && n < (ssize_t)sizeof(buf))
			return;
	}
}

static void py_unwatch(struct py_call *c)
{
	struct sbd_loop *l = c->fb->b.loop;
	sbd_watch_del(l, &c->w_out);
	sbd_watch_del(l, &c->w_err);
	sbd_watch_del(l, &c->w_ctl);
	sbd_watch_del(l, &c->w_pid);
	sbd_watch_del(l, &c->w_timer);
	if (c->timer_fd >= 0)
		close(c->timer_fd);
	c->timer_fd = -1;
	for (struct py_call **p = &c->fb->calls; *p; p = &(*p)->next)
		if (*p == c) {
			*p = c->next;
			break;
		}
}

/* Ends a call: the worker goes back to its pool when it is healthy (keep),
 * else it is killed. Reports the exit unless cancelled. */
static void py_finish(struct py_call *c, bool keep, bool report)
{
	py_unwatch(c);
	ns_release(c->fb, c->ns_fd);
	struct fn_pool *p = c->pool;
	struct fn_worker *w = c->w;
	if (keep && (++w->calls < PY_MAX_CALLS || p->keep[0]) && p->nidle < POOL_MAX) {
		w->next = p->idle;
		p->idle = w;
		p->nidle++;
	} else {
		worker_free(w);
		pool_kick(p);
	}
	struct sbd_exit ex = c->ex;
	ex.duration_us = mono_us() - c->start_us;
	struct sbd_exec_sink sink = c->sink;
	free(c);
	if (report)
		sink.exit(sink.ctx, &ex);
}

static void py_out_io(void *ctx, uint32_t ev)
{
	py_forward(ctx, 1, false);
}

static void py_err_io(void *ctx, uint32_t ev)
{
	py_forward(ctx, 2, false);
}

static void py_ctl_io(void *ctx, uint32_t ev)
{
	struct py_call *c = ctx;
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int))];
	} cm;
	struct iovec iov = {c->resp + c->resp_len, sizeof(c->resp) - c->resp_len};
	struct msghdr mh = {
	    .msg_iov = &iov, .msg_iovlen = 1, .msg_control = &cm, .msg_controllen = sizeof(cm)};
	ssize_t n = recvmsg(c->w->ctl, &mh, MSG_CMSG_CLOEXEC);
	for (struct cmsghdr *h = n > 0 ? CMSG_FIRSTHDR(&mh) : NULL; h; h = CMSG_NXTHDR(&mh, h))
		if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS) {
			int fd;
			memcpy(&fd, CMSG_DATA(h), sizeof(fd));
			ns_release(c->fb, c->ns_fd); /* the call's mount namespace: see py_boot */
			c->ns_fd = fd;
		}
	if (n < 0 && errno == EAGAIN)
		return;
	if (n <= 0)
		return; /* the worker died: the pidfd reports it */
	c->resp_len += (size_t)n;
	while (c->resp_len >= 4 && !memcmp(c->resp, "\0\0\0\0", 4)) { /* the ns frame */
		memmove(c->resp, c->resp + 4, c->resp_len - 4);
		c->resp_len -= 4;
	}
	if (c->resp_len < 4)
		return;
	uint32_t len = c->resp[0] | (uint32_t)c->resp[1] << 8 | (uint32_t)c->resp[2] << 16 |
		       (uint32_t)c->resp[3] << 24;
	if (len > sizeof(c->resp) - 4) {
		py_finish(c, false, true);
		return;
	}
	if (c->resp_len < 4 + len)
		return;
	struct json *j = json_parse((char *)c->resp + 4, len, NULL, 0);
	int64_t code = 1, signo = 0;
	json_int(json_get(j, "exit_code"), -1, 255, &code);
	json_int(json_get(j, "signal"), 0, 64, &signo);
	const struct json *oom = json_get(j, "oom");
	c->ex.exit_code = (int)code;
	c->ex.signo = (int)signo;
	c->ex.oom_killed = oom && oom->type == JSON_BOOL && oom->b;
	json_free(j);
	/* Output printed before the answer is in the pipes already. */
	py_forward(c, 1, true);
	py_forward(c, 2, true);
	py_finish(c, c->resp_len == 4 + len, true);
}

#ifdef STRATA_HAVE_CONTAINER
static void py_pid_io(void *ctx, uint32_t ev)
{
	struct py_call *c = ctx;
	siginfo_t si = {0};
	if (sbx_worker_reap(&c->w->sw, false, &si) != 1)
		return;
	py_forward(c, 1, true);
	py_forward(c, 2, true);
	if (si.si_code == CLD_EXITED) {
		c->ex.exit_code = si.si_status;
	} else {
		c->ex.exit_code = -1;
		c->ex.signo = si.si_status;
	}
	py_finish(c, false, true);
}

static void py_timer_io(void *ctx, uint32_t ev)
{
	struct py_call *c = ctx;
	c->ex.timed_out = true;
	syscall(SYS_pidfd_send_signal, worker_pidfd(c->w), SIGKILL, NULL, 0);
	sbd_watch_del(c->fb->b.loop, &c->w_timer);
}

/* The call's cpu limit (a write only when it differs from the last). */
static int py_cpu(struct fn_worker *w, uint32_t cpu_millis)
{
	return sbx_workers_have_cpu(w->fb->ws) ? sbx_worker_set_cpu(&w->sw, cpu_millis) : 0;
}
#else
static void py_pid_io(void *ctx, uint32_t ev)
{
}
static void py_timer_io(void *ctx, uint32_t ev)
{
}
static int py_cpu(struct fn_worker *w, uint32_t cpu_millis)
{
	return -ENODEV;
}
#endif

static void py_request(struct jw *w, const struct sbd_exec_req *req)
{
	size_t at = w->len;
	jw_append(w, "\0\0\0\0", 4);
	jw_obj(w);
	jw_kstr(w, "source", req->python);
	jw_key(w, "env");
	jw_arr(w);
	for (char **e = req->env; e && *e; e++)
		jw_str(w, *e);
	jw_arr_end(w);
	jw_kstr(w, "cwd", req->cwd);
	jw_key(w, "stdin");
	jw_b64(w, req->stdin_data ? (const void *)req->stdin_data : "", req->stdin_len);
	jw_obj_end(w);
	if (w->err)
		return;
	uint32_t n = (uint32_t)(w->len - at - 4);
	uint8_t h[4] = {(uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16), (uint8_t)(n >> 24)};
	memcpy(w->buf + at, h, 4);
}

static int py_arm(struct py_call *c, const struct sbd_exec_req *req)
{
	struct sbd_loop *l = c->fb->b.loop;
	struct fn_worker *w = c->w;
	struct itimerspec its = {
	    .it_value = {req->timeout_ms / 1000, (req->timeout_ms % 1000) * 1000000}};
	int r;
	c->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (c->timer_fd < 0 || timerfd_settime(c->timer_fd, 0, &its, NULL) < 0)
		return -errno;
	int fds[] = {w->out, w->err, w->ctl};
	for (size_t i = 0; i < ARRAY_SIZE(fds); i++)
		if (fcntl(fds[i], F_SETFL, O_NONBLOCK) < 0)
			return -errno;
	if ((r = sbd_watch_add(l, &c->w_out, w->out, EPOLLIN, py_out_io, c)) < 0 ||
	    (r = sbd_watch_add(l, &c->w_err, w->err, EPOLLIN, py_err_io, c)) < 0 ||
	    (r = sbd_watch_add(l, &c->w_ctl, w->ctl, EPOLLIN, py_ctl_io, c)) < 0 ||
	    (r = sbd_watch_add(l, &c->w_pid, worker_pidfd(w), EPOLLIN, py_pid_io, c)) < 0 ||
	    (r = sbd_watch_add(l, &c->w_timer, c->timer_fd, EPOLLIN, py_timer_io, c)) < 0)
		return r;
	return 0;
}

static int py_exec(struct fn_backend *fb, struct fn_pool *p, uint32_t cpu_millis,
		   const struct sbd_exec_req *req, const struct sbd_exec_sink *sink, void **ret)
{
	struct fn_worker *w = NULL;
	int r = pool_take(p, &w);
	if (r < 0)
		return r;
	if ((r = py_cpu(w, cpu_millis)) < 0) {
		worker_free(w);
		pool_kick(p);
		return r;
	}
	struct py_call *c = calloc(1, sizeof(*c));
	if (!c) {
		worker_free(w);
		return -ENOMEM;
	}
	c->w_out.fd = c->w_err.fd = c->w_ctl.fd = c->w_pid.fd = c->w_timer.fd = c->timer_fd = -1;
	*c = (struct py_call){.fb = fb,
			      .pool = p,
			      .w = w,
			      .sink = *sink,
			      .cap = req->output_cap,
			      .start_us = mono_us(),
			      .timer_fd = -1,
			      .ns_fd = -1,
			      .w_out.fd = -1,
			      .w_err.fd = -1,
			      .w_ctl.fd = -1,
			      .w_pid.fd = -1,
			      .w_timer.fd = -1};
	c->next = fb->calls;
	fb->calls = c;
	int busy = pool_busy(p);
	if (busy > p->peak)
		p->peak = busy;
	if (w->in >= 0) { /* stdin travels in the request */
		close(w->in);
		w->in = -1;
	}
	struct jw j;
	jw_init(&j);
	py_request(&j, req);
	r = j.err ?: write_all(w->ctl, j.buf, j.len);
	jw_done(&j);
	if (r == 0)
		r = py_arm(c, req);
	if (r < 0) {
		py_finish(c, false, false);
		return r;
	}
	*ret = c;
	return 0;
}

static bool py_cancel(struct fn_backend *fb, void *handle)
{
	for (struct py_call *c = fb->calls; c; c = c->next)
		if (c == handle) {
			py_finish(c, false, false);
			return true;
		}
	return false;
}

/* ---- command calls on warm library sandboxes ---------------------------------- */

#define FN_DISK_MAX (64LL << 20) /* the writable layer (/tmp included), at most */
#define EXEC_GRACE_MS 10000	 /* beyond a call's timeout, as sbx_exec waits */
#define CPOOL_DROP_MS 300000	 /* a pool without calls for this long is freed */

#ifdef STRATA_HAVE_CONTAINER

/* One command call: one exec in a warm sandbox, which is destroyed after. */
struct cmd_call {
	struct fn_backend *fb;
	struct cmd_pool *pool;
	struct sbx *s;
	struct sbx_exec_op *op;
	struct sbd_watch w;	  /* the agent's stream */
	struct sbd_watch w_retry; /* the client is behind, or stdin is full */
	int retry_fd;
	bool throttled, in_retry;
	struct sbd_exec_sink sink;
	/* stdin beyond the first chunk the request carries (> 1 MiB in all) */
	uint8_t *in;
	size_t in_len, in_off, in_sent;
	bool in_busy; /* a chunk waits for its acknowledgement */
	bool exit_pending;
	struct sbd_exit exit;
	int64_t deadline_ms;
	char argv0[128];	 /* for the message of a command that could not start */
	char cwd[256], user[64]; /* the same */
	struct cmd_call *next;	 /* in fb->cmds */
};

static void cmd_box_push(struct cmd_pool *p, struct cmd_box *bx)
{
	bx->next = p->idle;
	p->idle = bx;
	p->nidle++;
}

/* A new warm sandbox of pool p (sandboxes of a pool differ in nothing; a
 * pool's key fields do not change while a create for it is in flight). */
static int cpool_create(struct fn_backend *fb, const struct cmd_pool *p, struct sbx **ret)
{
	struct sbx_config c = {.rootfs = p->rootfs,
			       .hostname = "sandbox",
			       .memory_bytes = (uint64_t)p->memory_mb << 20,
			       .cpu_millis = p->cpu_millis,
			       .pids_max = (uint32_t)p->pids,
			       .disk_bytes = (uint64_t)p->disk_mb << 20,
			       .network = p->net_host ? SBX_NET_HOST : SBX_NET_NONE};
	return sbx_create(fb->rt, &c, ret);
}

/* The filler threads: make warm sandboxes for pools below their target. */
static void *filler_main(void *arg)
{
	struct fn_backend *fb = arg;
	pthread_mutex_lock(&fb->mu);
	while (!fb->stop) {
		/* the pool below its target that was called last; idle ones only
		 * under WARM_IDLE_MAX */
		int warm = 0;
		for (struct cmd_pool *q = fb->cpools; q; q = q->next)
			warm += q->nidle + q->creating;
		int64_t now = sbd_now_ms();
		struct cmd_pool *p = NULL;
		for (struct cmd_pool *q = fb->cpools; q; q = q->next) {
			if (q->err || q->nidle + q->creating >= q->target)
				continue;
			if (now - q->last_call_ms > ACTIVE_MS && warm >= WARM_IDLE_MAX)
				continue;
			if (!p || q->last_call_ms > p->last_call_ms)
				p = q;
		}
		if (!p) {
			pthread_cond_wait(&fb->fill, &fb->mu);
			continue;
		}
		p->creating++;
		pthread_mutex_unlock(&fb->mu);
		struct sbx *s = NULL;
		struct cmd_box *bx = malloc(sizeof(*bx));
		int r = bx ? cpool_create(fb, p, &s) : -ENOMEM;
		pthread_mutex_lock(&fb->mu);
		p->creating--;
		if (r < 0) {
			p->err = r;
			free(bx);
		} else {
			bx->s = s;
			cmd_box_push(p, bx);
		}
	}
	pthread_mutex_unlock(&fb->mu);
	return NULL;
}

static void fillers_start(struct fn_backend *fb)
{
	while (fb->nfillers < FILL_THREADS &&
	       pthread_create(&fb->fillers[fb->nfillers], NULL, filler_main, fb) == 0)
		fb->nfillers++;
}

static void fillers_stop(struct fn_backend *fb)
{
	pthread_mutex_lock(&fb->mu);
	fb->stop = true;
	pthread_cond_broadcast(&fb->fill);
	pthread_mutex_unlock(&fb->mu);
	while (fb->nfillers)
		pthread_join(fb->fillers[--fb->nfillers], NULL);
}

static void cpool_kick(struct fn_backend *fb)
{
	pthread_mutex_lock(&fb->mu);
	pthread_cond_signal(&fb->fill);
	pthread_mutex_unlock(&fb->mu);
}

static int64_t disk_mb_of(const struct sbd_sandbox *sb)
{
	int64_t max = FN_DISK_MAX >> 20;
	return sb->disk_mb > 0 && sb->disk_mb < max ? sb->disk_mb : max;
}

/* The pool of sb's image, network and limits (made on first use). */
static struct cmd_pool *cpool_get(struct fn_backend *fb, const struct sbd_sandbox *sb)
{
	uint32_t cpu = cpu_millis_of(sb);
	int64_t disk = disk_mb_of(sb);
	for (struct cmd_pool *p = fb->cpools; p; p = p->next)
		if (p->net_host == sb->net_host && p->memory_mb == sb->memory_mb &&
		    p->pids == sb->pids && p->disk_mb == disk && p->cpu_millis == cpu &&
		    same_image(p->img, p->rootfs, sb))
			return p;
	struct cmd_pool *p = calloc(1, sizeof(*p));
	if (!p || !(p->rootfs = strdup(sb->rootfs))) {
		free(p);
		return NULL;
	}
	p->img = sb->img;
	p->net_host = sb->net_host;
	p->memory_mb = sb->memory_mb;
	p->pids = sb->pids;
	p->disk_mb = disk;
	p->cpu_millis = cpu;
	p->last_use_ms = sbd_now_ms();
	pthread_mutex_lock(&fb->mu);
	p->target = fb->pool_min;
	p->next = fb->cpools;
	fb->cpools = p;
	pthread_cond_signal(&fb->fill);
	pthread_mutex_unlock(&fb->mu);
	return p;
}

/* Destroys idle sandboxes of p beyond keep (on the loop). */
static void cpool_trim(struct fn_backend *fb, struct cmd_pool *p, int keep)
{
	struct cmd_box *drop = NULL;
	pthread_mutex_lock(&fb->mu);
	while (p->nidle > keep && p->idle) {
		struct cmd_box *bx = p->idle;
		p->idle = bx->next;
		p->nidle--;
		bx->next = drop;
		drop = bx;
	}
	pthread_mutex_unlock(&fb->mu);
	while (drop) {
		struct cmd_box *bx = drop;
		drop = bx->next;
		sbx_destroy(bx->s);
		free(bx);
	}
}

/* An idle agent sends nothing: a readable stream means it is gone. */
static bool box_alive(struct sbx *s)
{
	struct pollfd pf = {.fd = sbx_agent_fd(s), .events = POLLIN};
	return poll(&pf, 1, 0) == 0;
}

/* Takes a warm sandbox of p, or makes one here when there is none. */
static int cpool_take(struct fn_backend *fb, struct cmd_pool *p, struct sbx **ret)
{
	p->uses++;
	p->last_use_ms = sbd_now_ms();
	for (;;) {
		pthread_mutex_lock(&fb->mu);
		p->err = 0;
		p->last_call_ms = p->last_use_ms;
		struct cmd_box *bx = p->idle;
		if (bx) {
			p->idle = bx->next;
			p->nidle--;
		} else if (p->target < POOL_MAX) {
			p->target++; /* demand: the next refill makes one more */
		}
		pthread_mutex_unlock(&fb->mu);
		if (!bx)
			break;
		struct sbx *s = bx->s;
		free(bx);
		if (box_alive(s)) {
			*ret = s;
			return 0;
		}
		sbx_destroy(s);
	}
	return cpool_create(fb, p, ret);
}

static void cmd_io(void *ctx, uint32_t ev);

static int cmd_watch(struct cmd_call *c)
{
	uint32_t ev = c->op ? (uint32_t)sbx_exec_op_events(c->op) : 0;
	if (c->throttled)
		return 0; /* the retry timer watches again */
	if (c->w.fd < 0)
		return sbd_watch_add(c->fb->b.loop, &c->w, sbx_agent_fd(c->s), ev, cmd_io, c);
	return sbd_watch_mod(c->fb->b.loop, &c->w, ev);
}

static void cmd_retry_io(void *ctx, uint32_t ev);

/* Looks again in 5 ms (a client that is behind, or stdin that is full). */
static int cmd_retry_arm(struct cmd_call *c)
{
	struct itimerspec its = {.it_value = {0, 5 * 1000000}};
	if (c->retry_fd < 0) {
		c->retry_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
		if (c->retry_fd < 0)
			return -errno;
		int r = sbd_watch_add(c->fb->b.loop, &c->w_retry, c->retry_fd, EPOLLIN,
				      cmd_retry_io, c);
		if (r < 0) {
			close(c->retry_fd);
			c->retry_fd = -1;
			return r;
		}
	}
	return timerfd_settime(c->retry_fd, 0, &its, NULL) < 0 ? -errno : 0;
}

/* Ends a call: answers (unless cancelled), then destroys its sandbox and
 * has a replacement made, off the critical path. */
static void cmd_finish(struct cmd_call *c, bool report)
{
	struct fn_backend *fb = c->fb;
	struct sbd_loop *l = fb->b.loop;
	sbd_watch_del(l, &c->w);
	sbd_watch_del(l, &c->w_retry);
	if (c->retry_fd >= 0)
		close(c->retry_fd);
	for (struct cmd_call **q = &fb->cmds; *q; q = &(*q)->next)
		if (*q == c) {
			*q = c->next;
			break;
		}
	sbx_exec_op_free(c->op);
	struct sbd_exec_sink sink = c->sink;
	struct sbd_exit e = c->exit;
	struct sbx *s = c->s;
	free(c->in);
	free(c);
	if (report)
		sink.exit(sink.ctx, &e);
	sbx_destroy(s);
	cpool_kick(fb);
}

/* Sends the next chunk of stdin the request did not carry. */
static void cmd_feed(struct cmd_call *c)
{
	while (c->in && !c->in_busy && !c->in_retry) {
		size_t n = c->in_len - c->in_off;
		n = n < SBX_STDIN_MAX_CHUNK ? n : SBX_STDIN_MAX_CHUNK;
		bool eof = c->in_off + n == c->in_len;
		int r = sbx_exec_op_stdin(c->op, c->in + c->in_off, n, eof);
		if (r == 0) { /* its acknowledgement follows */
			c->in_busy = true;
			c->in_sent = n;
			return;
		}
		if (r == 1 && !eof) { /* an agent that does not acknowledge */
			c->in_off += n;
			continue;
		}
		free(c->in); /* all sent, or the command's stdin is closed */
		c->in = NULL;
	}
}

static void cmd_started(void *ud, int mode)
{
	cmd_feed(ud);
}

static void cmd_output(void *ud, int stream, const void *data, size_t len)
{
	struct cmd_call *c = ud;
	if (!c->exit_pending)
		c->sink.output(c->sink.ctx, stream, data, len);
}

static void cmd_stdin_ack(void *ud, int status, uint32_t pending)
{
	struct cmd_call *c = ud;
	c->in_busy = false;
	if (!c->in)
		return;
	if (status == -ENOBUFS) { /* dropped: the command is behind; again later */
		if (cmd_retry_arm(c) == 0) {
			c->in_retry = true;
			return;
		}
		status = -EPIPE;
	}
	if (status < 0) { /* the command closed its stdin */
		free(c->in);
		c->in = NULL;
		return;
	}
	c->in_off += c->in_sent;
	if (c->in_off == c->in_len) {
		free(c->in);
		c->in = NULL;
		return;
	}
	cmd_feed(c);
}

static void cmd_exit(void *ud, int r, const struct sbx_exec_result *res)
{
	struct cmd_call *c = ud;
	if (c->exit_pending)
		return;
	struct sbd_exit e = sbd_exit_of(res);
	if (r == -EPIPE || r == -EPROTO || r == -EBADMSG || r == -ETIMEDOUT) {
		e.exit_code = -1;
		snprintf(e.error, sizeof(e.error), "the call's sandbox failed: %s", strerror(-r));
	} else if (r < 0) {
		/* as a process that could not exec: 127 or 126 and why, on stderr */
		char msg[300];
		sbd_exit_cannot_start(&e, r, res ? (int)res->failed_step : SBX_STEP_UNKNOWN,
				      c->argv0, c->cwd, c->user);
		int n = snprintf(msg, sizeof(msg), "strata: %s\n", e.error);
		n = n < (int)sizeof(msg) ? n : (int)sizeof(msg) - 1;
		c->sink.output(c->sink.ctx, 2, msg, (size_t)n);
		e.stderr_bytes = (uint64_t)n;
	}
	c->exit = e;
	c->exit_pending = true;
}

/* The client is behind: stop reading the agent's stream for 5 ms (the
 * agent stops reading the command's pipes past 4 MiB queued, and the
 * command blocks). The watch is taken off, not muted: a hang-up would
 * still be reported, again and again. */
static bool cmd_throttle(struct cmd_call *c)
{
	if (c->exit_pending || !c->sink.congested || !c->sink.congested(c->sink.ctx))
		return false;
	if (cmd_retry_arm(c) < 0)
		return false;
	sbd_watch_del(c->fb->b.loop, &c->w);
	c->throttled = true;
	return true;
}

static void cmd_after(struct cmd_call *c, bool done)
{
	if (c->exit_pending || done) {
		if (!c->exit_pending) { /* cannot happen: done comes after exit */
			c->exit.exit_code = -1;
			snprintf(c->exit.error, sizeof(c->exit.error),
				 "the call ended without exit");
		}
		cmd_finish(c, true);
		return;
	}
	if (cmd_watch(c) < 0) {
		cmd_exit(c, -EPIPE, NULL);
		cmd_finish(c, true);
	}
}

static void cmd_io(void *ctx, uint32_t ev)
{
	struct cmd_call *c = ctx;
	if (cmd_throttle(c))
		return;
	cmd_after(c, sbx_exec_op_io(c->op, (short)ev) == 1);
}

static void cmd_retry_io(void *ctx, uint32_t ev)
{
	struct cmd_call *c = ctx;
	uint64_t n;
	if (read(c->retry_fd, &n, sizeof(n)) < 0 && errno == EAGAIN)
		return;
	if (c->in_retry) {
		c->in_retry = false;
		cmd_feed(c);
	}
	c->throttled = false;
	cmd_after(c, false);
}

static int cmd_exec(struct fn_backend *fb, struct sbd_sandbox *sb, const struct sbd_exec_req *req,
		    int64_t uid, int64_t gid, const struct sbd_exec_sink *sink, void **ret,
		    struct strata_err *e)
{
	if (!fb->rt)
		return strata_err_set(e, -ENODEV,
				      "fncall command calls need the container runtime: %s",
				      fb->rt_why.msg);
	struct cmd_pool *p = cpool_get(fb, sb);
	struct cmd_call *c = p ? calloc(1, sizeof(*c)) : NULL;
	if (!c)
		return -ENOMEM;
	*c = (struct cmd_call){.fb = fb, .pool = p, .sink = *sink, .retry_fd = -1};
	c->w.fd = c->w_retry.fd = -1;
	snprintf(c->argv0, sizeof(c->argv0), "%s", req->argv[0]);
	snprintf(c->cwd, sizeof(c->cwd), "%s", req->cwd ? req->cwd : "/");
	/* the rest of a stdin larger than one chunk is fed as it is taken */
	size_t first = req->stdin_len;
	if (first > SBX_STDIN_MAX_CHUNK) {
		first = SBX_STDIN_MAX_CHUNK;
		c->in_len = req->stdin_len - first;
		if (!(c->in = malloc(c->in_len))) {
			free(c);
			return -ENOMEM;
		}
		memcpy(c->in, req->stdin_data + first, c->in_len);
	}
	/* the environment always carries a PATH */
	size_t n = 0;
	bool have_path = false;
	for (char **e = req->env; e && *e; e++, n++)
		have_path |= !strncmp(*e, "PATH=", 5);
	const char **env = calloc(n + 2, sizeof(*env));
	int r = env ? 0 : -ENOMEM;
	for (size_t i = 0; env && i < n; i++)
		env[i] = req->env[i];
	if (env && !have_path)
		env[n] = "PATH=" DEFAULT_PATH;
	char user[64];
	snprintf(user, sizeof(user), "%lld:%lld", (long long)uid, (long long)gid);
	snprintf(c->user, sizeof(c->user), "%s", user);
	struct sbx_exec_opts o = {
	    .argv = (const char *const *)req->argv,
	    .env = env,
	    .cwd = req->cwd,
	    .user = uid || gid ? user : NULL,
	    .timeout_ms = req->timeout_ms > UINT32_MAX ? UINT32_MAX : (uint32_t)req->timeout_ms,
	    .output_cap = req->output_cap ? req->output_cap : 1,
	    .stdin_data = req->stdin_data,
	    .stdin_len = first,
	    .stdin_stream = c->in != NULL,
	};
	static const struct sbx_exec_cbs cbs = {cmd_started, cmd_output, cmd_stdin_ack, cmd_exit};
	if (r == 0)
		r = cpool_take(fb, p, &c->s);
	if (r < 0) {
		strata_err_set(e, r, "cannot start a sandbox for the call: %s", strerror(-r));
	} else if ((r = sbx_exec_op_start(c->s, &o, &cbs, c, &c->op)) < 0 ||
		   (r = cmd_watch(c)) < 0) {
		strata_err_set(e, r, "cannot run the call: %s", strerror(-r));
		sbx_exec_op_free(c->op);
		sbx_destroy(c->s);
	}
	free(env);
	if (r < 0) {
		free(c->in);
		free(c);
		return r;
	}
	c->deadline_ms = sbd_now_ms() + req->timeout_ms + EXEC_GRACE_MS;
	c->next = fb->cmds;
	fb->cmds = c;
	*ret = c;
	return 0;
}

static bool cmd_cancel(struct fn_backend *fb, void *handle)
{
	for (struct cmd_call *c = fb->cmds; c; c = c->next)
		if (c == handle) {
			cmd_finish(c, false); /* destroying the sandbox kills it all */
			return true;
		}
	return false;
}

/* At every tick: a call whose agent did not answer within its timeout and
 * a grace period fails (as sbx_exec would); idle pools shrink. */
static void cmd_tick(struct fn_backend *fb, int64_t now)
{
	struct cmd_call *c = fb->cmds;
	while (c) {
		struct cmd_call *next = c->next;
		if (now > c->deadline_ms) {
			cmd_exit(c, -ETIMEDOUT, NULL);
			cmd_finish(c, true);
		}
		c = next;
	}
	for (struct cmd_pool **pp = &fb->cpools; *pp;) {
		struct cmd_pool *p = *pp;
		/* enough for a tenth of a second of calls */
		int want = p->uses / 10 + 1;
		want = want < fb->pool_min ? fb->pool_min : want > POOL_MAX ? POOL_MAX : want;
		p->uses = 0;
		bool idle = now - p->last_use_ms > ACTIVE_MS,
		     gone = now - p->last_use_ms > CPOOL_DROP_MS;
		pthread_mutex_lock(&fb->mu);
		if (want >= p->target || idle)
			p->target = gone ? 0 : want;
		int keep = p->target;
		bool unlink = gone && !p->creating;
		if (unlink)
			*pp = p->next;
		else
			pthread_cond_signal(&fb->fill);
		pthread_mutex_unlock(&fb->mu);
		cpool_trim(fb, p, unlink ? 0 : keep);
		if (unlink) {
			free(p->rootfs);
			free(p);
		} else {
			pp = &p->next;
		}
	}
}

static void cmd_backend_init(struct fn_backend *fb, struct sbd_backend *container)
{
	fb->rt = container ? sbd_backend_container_runtime(container) : NULL;
	if (!fb->rt) {
		struct sbd_caps k = {0};
		if (container)
			container->caps(container, &k);
		strata_err_set(&fb->rt_why, -ENODEV, "%s",
			       k.why.msg[0] ? k.why.msg : "no container runtime");
		return;
	}
	fillers_start(fb);
}

static void cmd_backend_free(struct fn_backend *fb)
{
	while (fb->cmds)
		cmd_finish(fb->cmds, false);
	fillers_stop(fb);
	while (fb->cpools) {
		struct cmd_pool *p = fb->cpools;
		fb->cpools = p->next;
		cpool_trim(fb, p, 0);
		free(p->rootfs);
		free(p);
	}
}

#else /* !STRATA_HAVE_CONTAINER: no command calls */

struct cmd_call;

static struct cmd_pool *cpool_get(struct fn_backend *fb, const struct sbd_sandbox *sb)
{
	return NULL;
}
static void cpool_kick(struct fn_backend *fb)
{
}
static int cmd_exec(struct fn_backend *fb, struct sbd_sandbox *sb, const struct sbd_exec_req *req,
		    int64_t uid, int64_t gid, const struct sbd_exec_sink *sink, void **ret,
		    struct strata_err *e)
{
	return strata_err_set(e, -ENODEV, "fncall command calls need the container library");
}
static bool cmd_cancel(struct fn_backend *fb, void *handle)
{
	return false;
}
static void cmd_tick(struct fn_backend *fb, int64_t now)
{
}
static void cmd_backend_init(struct fn_backend *fb, struct sbd_backend *container)
{
	strata_err_set(&fb->rt_why, -ENODEV, "no container library");
}
static void cmd_backend_free(struct fn_backend *fb)
{
}

#endif /* STRATA_HAVE_CONTAINER */

static int fn_exec(struct sbd_backend *b, struct sbd_sandbox *sb, const struct sbd_exec_req *req,
		   const struct sbd_exec_sink *sink, void **ret_handle, struct strata_err *e)
{
	struct fn_backend *fb = b->priv;
	int64_t uid, gid;
	if (parse_user(sb->rootfs, req->user, &uid, &gid) < 0)
		return strata_err_set(e, -EINVAL, "user '%s' is not in the image's /etc/passwd",
				      req->user);
	struct sbd_exec_req q = *req;
	char *pyargv[] = {"/usr/bin/python3", "-c", (char *)req->python, NULL};
	if (req->python) {
		if (!has_python(sb->rootfs))
			return strata_err_set(e, -EOPNOTSUPP, "image '%s' has no /usr/bin/python3",
					      sb->image);
		if (uid == 0) { /* warm interpreters run as root without capabilities */
			if (fb->py_why.code)
				return strata_err_set(e, -ENODEV,
						      "fncall Python calls are unavailable: %s",
						      fb->py_why.msg);
			struct fn_pool *p = pool_get(fb, sb);
			int r =
			    p ? py_exec(fb, p, cpu_millis_of(sb), &q, sink, ret_handle) : -ENOMEM;
			if (r == -EBUSY)
				return strata_err_set(
				    e, r,
				    "a keep_state sandbox runs one Python call at "
				    "a time: another is running");
			if (r < 0)
				strata_err_set(e, r, "cannot run the call: %s", strerror(-r));
			return r;
		}
		q.python = NULL;
		q.argv = pyargv;
	}
	return cmd_exec(fb, sb, &q, uid, gid, sink, ret_handle, e);
}

static void fn_exec_cancel(struct sbd_backend *b, void *handle)
{
	struct fn_backend *fb = b->priv;
	if (!py_cancel(fb, handle))
		cmd_cancel(fb, handle);
}

static void fn_caps(struct sbd_backend *b, struct sbd_caps *k)
{
	struct fn_backend *fb = b->priv;
	*k = (struct sbd_caps){.available = true,
			       .exec = true,
			       .exec_stream = true,
			       .exec_stdin = true,
			       .python = !fb->py_why.code,
			       .network_host = true,
			       .limits_memory = true,
			       .limits_pids = fb->rt != NULL,
			       .limits_cpu = fb->rt != NULL,
			       .limits_disk = true};
}

static int fn_create(struct sbd_backend *b, struct sbd_sandbox *sb, struct strata_err *e)
{
	struct fn_backend *fb = b->priv;
	if (fb->rt && !cpool_get(fb, sb))
		return -ENOMEM;
	cpool_kick(fb);
	struct fn_pool *p;
	if (!fb->py_why.code && has_python(sb->rootfs) && (p = pool_get(fb, sb)))
		pool_kick(p);
	return 0;
}

static int fn_adopt(struct sbd_backend *b, struct sbd_sandbox *sb)
{
	return 0; /* a fncall sandbox is a record: its calls did not survive */
}

static int fn_unsupported(struct sbd_backend *b, struct sbd_sandbox *sb)
{
	return -EOPNOTSUPP;
}

static int fn_file(struct sbd_backend *b, struct sbd_sandbox *sb, struct sbd_file_req *req)
{
	return -EOPNOTSUPP;
}

/* A keep_state sandbox's pool goes with it (its interpreter, its state);
 * one with a call still running is emptied and freed by fn_tick after. */
static int fn_destroy(struct sbd_backend *b, struct sbd_sandbox *sb)
{
	struct fn_backend *fb = b->priv;
	for (struct fn_pool *p = fb->pools; p; p = p->next)
		if (sb->keep_state && !strcmp(p->keep, sb->id)) {
			strcpy(p->keep, "-"); /* matches no sandbox */
			p->target = 0;
			pool_trim(p, 0);
		}
	return 0;
}

static void fn_tick(struct sbd_backend *b)
{
	struct fn_backend *fb = b->priv;
#ifdef STRATA_HAVE_CONTAINER
	if (fb->ws)
		sbx_workers_tick(fb->ws);
#endif
	int64_t now = sbd_now_ms();
	cmd_tick(fb, now);
	for (struct fn_pool **pp = &fb->pools; *pp;) {
		struct fn_pool *d = *pp;
		if (strcmp(d->keep, "-") || pool_busy(d) || d->refill_queued) {
			pp = &d->next;
			continue;
		}
		pool_trim(d, 0);
		*pp = d->next;
		free(d->rootfs);
		free(d);
	}
	for (struct fn_pool *p = fb->pools; p; p = p->next) {
		if (p->keep[0]) { /* one interpreter, kept while its sandbox is */
			pool_trim(p, p->target);
			continue;
		}
		/* interpreters: the peak of concurrent calls, plus one */
		int busy = pool_busy(p);
		if (busy > p->peak)
			p->peak = busy;
		int want = p->peak + 1;
		if (want < fb->pool_min)
			want = fb->pool_min;
		p->uses = 0;
		p->peak = 0;
		if (want > POOL_MAX)
			want = POOL_MAX;
		if (want >= p->target || now - p->last_use_ms > 10000)
			p->target = want;
		pool_trim(p, p->target > busy ? p->target - busy : 0);
		pool_kick(p);
	}
}

static void fn_free(struct sbd_backend *b)
{
	struct fn_backend *fb = b->priv;
	while (fb->calls)
		py_finish(fb->calls, false, false);
	cmd_backend_free(fb);
	while (fb->pools) {
		struct fn_pool *p = fb->pools;
		fb->pools = p->next;
		while (p->idle) {
			struct fn_worker *w = p->idle;
			p->idle = w->next;
			worker_free(w);
		}
		free(p->rootfs);
		free(p);
	}
	closer_stop(fb);
#ifdef STRATA_HAVE_CONTAINER
	sbx_workers_free(fb->ws);
#endif
	pthread_mutex_destroy(&fb->mu);
	pthread_cond_destroy(&fb->fill);
	free(fb);
}

/* The container library's workers, below strata-fncall: Python calls as
 * root need them, with pids and memory cgroups. */
static void workers_init(struct fn_backend *fb)
{
#ifdef STRATA_HAVE_CONTAINER
	int r =
	    sbx_workers_new(&(struct sbx_workers_config){.cgroup_name = "strata-fncall"}, &fb->ws);
	if (r < 0)
		strata_err_set(&fb->py_why, -ENODEV, "no seccomp filter: %s", strerror(-r));
	else if (!sbx_workers_cgroup_version(fb->ws))
		strata_err_set(&fb->py_why, -ENODEV,
			       "no pids and memory cgroups for the Python workers");
#else
	strata_err_set(&fb->py_why, -ENODEV,
		       "no seccomp filter (built without the container library)");
#endif
}

struct sbd_backend *sbd_backend_fncall_new(struct sbd_loop *loop, int pool_min,
					   struct sbd_backend *container)
{
	struct fn_backend *fb = calloc(1, sizeof(*fb));
	if (!fb)
		return NULL;
	fb->pool_min = pool_min;
	pthread_mutex_init(&fb->mu, NULL);
	pthread_cond_init(&fb->fill, NULL);
	workers_init(fb);
	closer_start(fb);
	fb->b = (struct sbd_backend){
	    .name = "fncall",
	    .loop = loop,
	    .priv = fb,
	    .caps = fn_caps,
	    .create = fn_create,
	    .adopt = fn_adopt,
	    .exec = fn_exec,
	    .exec_cancel = fn_exec_cancel,
	    .file = fn_file,
	    .pause = fn_unsupported,
	    .resume = fn_unsupported,
	    .destroy = fn_destroy,
	    .tick = fn_tick,
	    .free = fn_free,
	};
	cmd_backend_init(fb, container);
	return &fb->b;
}
