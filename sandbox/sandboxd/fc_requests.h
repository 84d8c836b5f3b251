/* fc_requests.h — the bodies of the Firecracker API requests the firecracker
 * backend sends (src/firecracker/swagger/firecracker.yaml upstream; checked
 * against it by tests/sandbox/firecracker/).
 *
 * Each builder fills a struct fc_req: method, path and a JSON body made with
 * fs/json.h's emitter. Builders never send anything (fc_client.h does), so a
 * test can produce every request without a Firecracker. Invariants:
 *  1. Only fields of the schema are emitted; optional ones only when set.
 *  2. A builder fails with -EINVAL (drive ids outside [A-Za-z0-9_-]{1,64},
 *     empty paths) or -ENOMEM, leaving r empty. */
#pragma once
#include <stdbool.h>
#include <stddef.h>

struct fc_req {
	const char *method; /* "PUT" | "PATCH" | "GET" */
	char path[96];
	char *body; /* malloc'ed JSON, NULL for none */
	size_t len;
};

void fc_req_done(struct fc_req *r);

int fc_req_machine_config(struct fc_req *r, int vcpus, int mem_mib);
int fc_req_boot_source(struct fc_req *r, const char *kernel, const char *initrd /* or NULL */,
		       const char *boot_args /* or NULL */);
int fc_req_drive(struct fc_req *r, const char *id, const char *path, bool read_only, bool root);
int fc_req_vsock(struct fc_req *r, unsigned guest_cid, const char *uds_path);
int fc_req_start(struct fc_req *r);
int fc_req_vm_state(struct fc_req *r, bool paused);
int fc_req_snapshot_create(struct fc_req *r, const char *snapshot_path, const char *mem_path);
int fc_req_snapshot_load(struct fc_req *r, const char *snapshot_path, const char *mem_path,
			 bool resume);
