/* backend_vm.c — the "firecracker" and "qemu" backends, which are not built
 * yet. They exist so that clients get a clear, typed answer (backend
 * unavailable, with the reason) instead of an unknown-backend error, and so
 * that capabilities() lists every backend. The reason says what is missing
 * on this node (Firecracker and QEMU/KVM both need /dev/kvm). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sandbox/sandboxd/sandboxd.h"

struct vm_backend {
	struct sbd_backend b;
	char kind[16];
};

static void vm_caps(struct sbd_backend *b, struct sbd_caps *k)
{
	struct vm_backend *vb = b->priv;
	bool kvm = access("/dev/kvm", R_OK | W_OK) == 0;
	*k = (struct sbd_caps){0};
	strata_err_set(&k->why, -ENODEV, "the %s backend is not implemented yet%s", vb->kind,
		       kvm ? "" : "; it also needs /dev/kvm, which this node does not have");
}

static int vm_create(struct sbd_backend *b, struct sbd_sandbox *sb, struct strata_err *e)
{
	struct sbd_caps k;
	vm_caps(b, &k);
	return strata_err_set(e, -ENODEV, "%s", k.why.msg);
}

static int vm_adopt(struct sbd_backend *b, struct sbd_sandbox *sb)
{
	return -ENODEV;
}

static int vm_exec(struct sbd_backend *b, struct sbd_sandbox *sb, const struct sbd_exec_req *req,
		   const struct sbd_exec_sink *sink, void **ret_handle, struct strata_err *e)
{
	return vm_create(b, sb, e);
}

static void vm_exec_cancel(struct sbd_backend *b, void *handle)
{
}

static int vm_file(struct sbd_backend *b, struct sbd_sandbox *sb, struct sbd_file_req *req)
{
	return -ENODEV;
}

static int vm_op(struct sbd_backend *b, struct sbd_sandbox *sb)
{
	return -ENODEV;
}

static int vm_destroy(struct sbd_backend *b, struct sbd_sandbox *sb)
{
	return 0;
}

static void vm_free(struct sbd_backend *b)
{
	free(b->priv);
}

struct sbd_backend *sbd_backend_vm_new(struct sbd_loop *loop, const char *kind)
{
	struct vm_backend *vb = calloc(1, sizeof(*vb));
	if (!vb)
		return NULL;
	snprintf(vb->kind, sizeof(vb->kind), "%s", kind);
	vb->b = (struct sbd_backend){
	    .name = vb->kind,
	    .loop = loop,
	    .priv = vb,
	    .caps = vm_caps,
	    .create = vm_create,
	    .adopt = vm_adopt,
	    .exec = vm_exec,
	    .exec_cancel = vm_exec_cancel,
	    .file = vm_file,
	    .pause = vm_op,
	    .resume = vm_op,
	    .destroy = vm_destroy,
	    .free = vm_free,
	};
	return &vb->b;
}
