/* fc_requests.c — JSON bodies of the Firecracker API requests (fc_requests.h). */
#include "sandbox/sandboxd/fc_requests.h"
#include "fs/json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void fc_req_done(struct fc_req *r)
{
	free(r->body);
	memset(r, 0, sizeof(*r));
}

static int finish(struct fc_req *r, struct jw *w, const char *method)
{
	if (w->err) {
		int err = w->err;
		jw_done(w);
		memset(r, 0, sizeof(*r));
		return err;
	}
	r->method = method;
	r->body = jw_take(w, &r->len);
	return 0;
}

static int begin(struct fc_req *r, struct jw *w, const char *path)
{
	memset(r, 0, sizeof(*r));
	snprintf(r->path, sizeof(r->path), "%s", path);
	jw_init(w);
	jw_obj(w);
	return 0;
}

int fc_req_machine_config(struct fc_req *r, int vcpus, int mem_mib)
{
	if (vcpus < 1 || vcpus > 32 || mem_mib < 1)
		return -EINVAL;
	struct jw w;
	begin(r, &w, "/machine-config");
	jw_kint(&w, "vcpu_count", vcpus);
	jw_kint(&w, "mem_size_mib", mem_mib);
	jw_obj_end(&w);
	return finish(r, &w, "PUT");
}

int fc_req_boot_source(struct fc_req *r, const char *kernel, const char *initrd,
		       const char *boot_args)
{
	if (!kernel || !kernel[0])
		return -EINVAL;
	struct jw w;
	begin(r, &w, "/boot-source");
	jw_kstr(&w, "kernel_image_path", kernel);
	if (initrd && initrd[0])
		jw_kstr(&w, "initrd_path", initrd);
	if (boot_args)
		jw_kstr(&w, "boot_args", boot_args);
	jw_obj_end(&w);
	return finish(r, &w, "PUT");
}

static bool id_ok(const char *id)
{
	size_t n = strlen(id);
	if (n < 1 || n > 64)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = id[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '-'))
			return false;
	}
	return true;
}

int fc_req_drive(struct fc_req *r, const char *id, const char *path, bool read_only, bool root)
{
	if (!id || !id_ok(id) || !path || !path[0])
		return -EINVAL;
	struct jw w;
	char p[96];
	snprintf(p, sizeof(p), "/drives/%s", id);
	begin(r, &w, p);
	jw_kstr(&w, "drive_id", id);
	jw_kstr(&w, "path_on_host", path);
	jw_kbool(&w, "is_root_device", root);
	jw_kbool(&w, "is_read_only", read_only);
	jw_obj_end(&w);
	return finish(r, &w, "PUT");
}

int fc_req_vsock(struct fc_req *r, unsigned guest_cid, const char *uds_path)
{
	if (guest_cid < 3 || !uds_path || !uds_path[0])
		return -EINVAL;
	struct jw w;
	begin(r, &w, "/vsock");
	jw_kint(&w, "guest_cid", guest_cid);
	jw_kstr(&w, "uds_path", uds_path);
	jw_obj_end(&w);
	return finish(r, &w, "PUT");
}

int fc_req_start(struct fc_req *r)
{
	struct jw w;
	begin(r, &w, "/actions");
	jw_kstr(&w, "action_type", "InstanceStart");
	jw_obj_end(&w);
	return finish(r, &w, "PUT");
}

int fc_req_vm_state(struct fc_req *r, bool paused)
{
	struct jw w;
	begin(r, &w, "/vm");
	jw_kstr(&w, "state", paused ? "Paused" : "Resumed");
	jw_obj_end(&w);
	return finish(r, &w, "PATCH");
}

int fc_req_snapshot_create(struct fc_req *r, const char *snapshot_path, const char *mem_path)
{
	if (!snapshot_path || !snapshot_path[0] || !mem_path || !mem_path[0])
		return -EINVAL;
	struct jw w;
	begin(r, &w, "/snapshot/create");
	jw_kstr(&w, "snapshot_type", "Full");
	jw_kstr(&w, "snapshot_path", snapshot_path);
	jw_kstr(&w, "mem_file_path", mem_path);
	jw_obj_end(&w);
	return finish(r, &w, "PUT");
}

int fc_req_snapshot_load(struct fc_req *r, const char *snapshot_path, const char *mem_path,
			 bool resume)
{
	if (!snapshot_path || !snapshot_path[0] || !mem_path || !mem_path[0])
		return -EINVAL;
	struct jw w;
	begin(r, &w, "/snapshot/load");
	jw_kstr(&w, "snapshot_path", snapshot_path);
	jw_key(&w, "mem_backend");
	jw_obj(&w);
	jw_kstr(&w, "backend_type", "File");
	jw_kstr(&w, "backend_path", mem_path);
	jw_obj_end(&w);
	jw_kbool(&w, "resume_vm", resume);
	jw_obj_end(&w);
	return finish(r, &w, "PUT");
}
