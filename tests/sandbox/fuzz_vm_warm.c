/* fuzz_vm_warm.c — libFuzzer target for the warm-start manifest decoder
 * (sandbox/vm/warm.c), which reads a file any node of the cluster may have
 * written: whatever decodes re-encodes to the same bytes, and a manifest
 * made from the input's fields decodes to them and is refused once any one
 * of its bytes is changed. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs/wire.h"
#include "sandbox/vm/warm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void roundtrip(const uint8_t *data, size_t size)
{
	struct vm_warm_manifest m;
	uint8_t buf[VM_WARM_MANIFEST_BYTES];
	if (vm_warm_manifest_decode(data, size, &m, NULL) < 0)
		return;
	if (strlen(m.key) != VM_WARM_KEY_LEN)
		abort();
	if (size != VM_WARM_MANIFEST_BYTES || m.minor != VM_WARM_MINOR)
		return; /* a newer minor's extra bytes are not ours to write */
	vm_warm_manifest_encode(&m, buf);
	if (memcmp(buf, data, size))
		abort();
}

static void one_byte_changed(const uint8_t *data, size_t size)
{
	struct vm_warm_manifest m = {.major = VM_WARM_MAJOR, .minor = VM_WARM_MINOR}, out;
	uint8_t buf[VM_WARM_MANIFEST_BYTES];
	if (size < 59)
		return;
	for (size_t i = 0; i < VM_WARM_KEY_LEN / 2; i++)
		snprintf(m.key + 2 * i, 3, "%02x", data[i]);
	m.state_bytes = le64_get(data + 16);
	m.state_sum = le64_get(data + 24);
	m.disk_bytes = le64_get(data + 32);
	m.disk_sum = le64_get(data + 40);
	m.saved_at = le64_get(data + 48);
	vm_warm_manifest_encode(&m, buf);
	if (vm_warm_manifest_decode(buf, sizeof(buf), &out, NULL) < 0 || strcmp(out.key, m.key) ||
	    out.state_bytes != m.state_bytes || out.state_sum != m.state_sum ||
	    out.disk_bytes != m.disk_bytes || out.disk_sum != m.disk_sum ||
	    out.saved_at != m.saved_at)
		abort();
	uint8_t x = data[56] ? data[56] : 1;
	buf[(data[57] | data[58] << 8) % sizeof(buf)] ^= x;
	if (vm_warm_manifest_decode(buf, sizeof(buf), &out, NULL) == 0)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	roundtrip(data, size);
	one_byte_changed(data, size);
	return 0;
}
