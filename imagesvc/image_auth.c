/* image_auth.c — the image key and the MACs of refs and records
 * (image_auth.h), HMAC-SHA256 from OpenSSL's libcrypto. */
#include "imagesvc/image_auth.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

/* Parsed configuration (STYLE.md rule 7): set once before any thread. */
static struct img_auth_key default_key;
static bool have_default;

void img_auth_derive(const struct rpc_key *cluster, struct img_auth_key *ret)
{
	static const char label[] = IMG_AUTH_SUBKEY_LABEL;
	unsigned int len = IMG_AUTH_KEY_SIZE;
	if (!HMAC(EVP_sha256(), cluster->b, RPC_KEY_SIZE, (const uint8_t *)label, sizeof(label) - 1,
		  ret->b, &len))
		abort(); /* no HMAC-SHA256 in libcrypto: nothing can be signed */
}

void img_auth_set_default(const struct img_auth_key *k)
{
	if (k)
		default_key = *k;
	else
		OPENSSL_cleanse(&default_key, sizeof(default_key));
	have_default = k != NULL;
}

int img_auth_load(const char *path, struct strata_err *e)
{
	struct rpc_key cluster;
	struct img_auth_key k;
	int r = rpc_key_load(path, &cluster, e);
	if (r < 0)
		return r;
	img_auth_derive(&cluster, &k);
	img_auth_set_default(&k);
	OPENSSL_cleanse(&cluster, sizeof(cluster));
	OPENSSL_cleanse(&k, sizeof(k));
	return 0;
}

int img_auth_default(struct img_auth_key *ret, struct strata_err *e)
{
	if (have_default) {
		*ret = default_key;
		return 0;
	}
	const struct rpc_cred *c = rpc_auth_default();
	if (c) {
		img_auth_derive(&c->key, ret);
		return 0;
	}
	const char *path = getenv(RPC_KEY_ENV);
	if (!path || !*path)
		return strata_err_set(e, -ENOKEY,
				      "no cluster key to sign or verify images with (run where the "
				      "home's cluster.key is, or set $%s to its path)",
				      RPC_KEY_ENV);
	struct rpc_key cluster;
	int r = rpc_key_load(path, &cluster, e);
	if (r < 0)
		return r;
	img_auth_derive(&cluster, ret);
	OPENSSL_cleanse(&cluster, sizeof(cluster));
	return 0;
}

/* HMAC(k, label || a || b) into out (one buffer: HMAC() is libcrypto's
 * one call that is not deprecated in OpenSSL 3 and still in 1.1). */
static int mac3(const struct img_auth_key *k, const char *label, const void *a, size_t na,
		const void *b, size_t nb, uint8_t out[IMG_AUTH_MAC_SIZE])
{
	size_t nl = strlen(label);
	uint8_t *msg = malloc(nl + na + nb + 1);
	unsigned int len = IMG_AUTH_MAC_SIZE;
	if (msg) {
		memcpy(msg, label, nl);
		memcpy(msg + nl, a, na);
		if (nb)
			memcpy(msg + nl + na, b, nb);
	}
	bool ok = msg && HMAC(EVP_sha256(), k->b, IMG_AUTH_KEY_SIZE, msg, nl + na + nb, out, &len);
	free(msg);
	return ok ? 0 : -ENOMEM;
}

int img_auth_ref_mac(const struct img_auth_key *k, const char *name, const uint8_t manifest[32],
		     uint8_t out[IMG_AUTH_MAC_SIZE])
{
	/* The name with its NUL: names cannot run into the digest. */
	return mac3(k, "strata-image-ref", name, strlen(name) + 1, manifest, 32, out);
}

int img_auth_record_mac(const struct img_auth_key *k, const void *buf, size_t n,
			uint8_t out[IMG_AUTH_MAC_SIZE])
{
	return mac3(k, "strata-image-record", buf, n, NULL, 0, out);
}

bool img_auth_mac_equal(const uint8_t a[IMG_AUTH_MAC_SIZE], const uint8_t b[IMG_AUTH_MAC_SIZE])
{
	return CRYPTO_memcmp(a, b, IMG_AUTH_MAC_SIZE) == 0;
}
