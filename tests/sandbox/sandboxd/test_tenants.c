/* test_tenants.c — unit test of the tenants file (sandbox/sandboxd/
 * tenants.h): a token matches its tenant and nothing else (a changed byte,
 * another tenant's name, a rotated token), the file written holds neither
 * the token nor its secret and reads back the same, a file others may write
 * is refused, and malformed files are refused with a reason. Exit 0 pass,
 * 1 fail. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandbox/sandboxd/tenants.h"
#include "tests/testutil.h"

static struct sbd_tenant tenant(const char *name)
{
	struct sbd_tenant tn = {.max_sandboxes = -1, .cpu = -1, .memory_mb = -1};
	snprintf(tn.name, sizeof(tn.name), "%s", name);
	return tn;
}

static void test_names(void)
{
	CHECK(sbd_tenant_name_valid("team-a_1"));
	CHECK(sbd_tenant_name_valid("0ps"));
	static const char *const bad[] = {"", "-a", "_a", "A", "a.b", "a b", "a/b", "é"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++)
		CHECK(!sbd_tenant_name_valid(bad[i]));
	char longest[SBD_TENANT_NAME_MAX + 2];
	memset(longest, 'a', sizeof(longest) - 1);
	longest[SBD_TENANT_NAME_MAX + 1] = 0;
	CHECK(!sbd_tenant_name_valid(longest));
	longest[SBD_TENANT_NAME_MAX] = 0;
	CHECK(sbd_tenant_name_valid(longest));
}

static void test_tokens(void)
{
	struct sbd_tenants t = {0};
	struct sbd_tenant a = tenant("a"), b = tenant("b");
	char ta[SBD_TENANT_TOKEN_MAX], tb[SBD_TENANT_TOKEN_MAX], wrong[SBD_TENANT_TOKEN_MAX];
	CHECK(sbd_tenant_new_token(&a, ta) == 0 && sbd_tenant_new_token(&b, tb) == 0);
	CHECK(!strncmp(ta, "a.", 2) && strlen(ta) == 2 + 64);
	CHECK(sbd_tenants_add(&t, &a) == 0 && sbd_tenants_add(&t, &b) == 0);
	CHECK(sbd_tenants_add(&t, &a) == -EEXIST);
	CHECK(sbd_tenants_match(&t, ta) == &t.v[0]);
	CHECK(sbd_tenants_match(&t, tb) == &t.v[1]);
	/* a's secret under b's name, a changed byte, a cut or longer token */
	snprintf(wrong, sizeof(wrong), "b%s", ta + 1);
	CHECK(!sbd_tenants_match(&t, wrong));
	snprintf(wrong, sizeof(wrong), "%s", ta);
	wrong[10] = wrong[10] == '0' ? '1' : '0';
	CHECK(!sbd_tenants_match(&t, wrong));
	wrong[10] = ta[10];
	wrong[strlen(wrong) - 1] = 0;
	CHECK(!sbd_tenants_match(&t, wrong));
	char longer[SBD_TENANT_TOKEN_MAX + 1];
	snprintf(longer, sizeof(longer), "%s0", ta);
	CHECK(!sbd_tenants_match(&t, longer));
	CHECK(!sbd_tenants_match(&t, "") && !sbd_tenants_match(&t, ".") &&
	      !sbd_tenants_match(&t, "a"));
	/* rotation: the old token is out */
	char again[SBD_TENANT_TOKEN_MAX];
	CHECK(sbd_tenant_new_token(&t.v[0], again) == 0 && strcmp(again, ta));
	CHECK(!sbd_tenants_match(&t, ta) && sbd_tenants_match(&t, again) == &t.v[0]);
	CHECK(sbd_tenants_remove(&t, "a") == 0 && sbd_tenants_remove(&t, "a") == -ENOENT);
	CHECK(!sbd_tenants_match(&t, again) && sbd_tenants_match(&t, tb) == &t.v[0]);
	CHECK(sbd_secret_equal("x", "x") && !sbd_secret_equal("x", "y") &&
	      !sbd_secret_equal("x", "xx"));
	sbd_tenants_done(&t);
}

static char *slurp(const char *path)
{
	static char buf[1 << 16];
	int fd = open(path, O_RDONLY);
	ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);
	if (fd >= 0)
		close(fd);
	buf[n > 0 ? n : 0] = 0;
	return buf;
}

static void test_file(const char *dir)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/tenants.json", dir);
	struct sbd_tenants t = {0}, back;
	struct sbd_tenant a = tenant("a");
	a.admin = true;
	a.max_sandboxes = 3;
	a.cpu = 2.5;
	a.memory_mb = 4096;
	a.created_at = 1764680000;
	char ta[SBD_TENANT_TOKEN_MAX];
	CHECK(sbd_tenant_new_token(&a, ta) == 0 && sbd_tenants_add(&t, &a) == 0);
	struct sbd_tenant b = tenant("b");
	CHECK(sbd_tenants_add(&t, &b) == 0);
	CHECK(sbd_tenants_save(path, &t) == 0);
	struct stat st;
	CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600);
	const char *text = slurp(path);
	CHECK(!strstr(text, ta) && !strstr(text, ta + 2)); /* neither token nor secret */
	struct strata_err e = {0};
	CHECK(sbd_tenants_load(path, &back, NULL, &e) == 0);
	CHECK(back.n == 2 && sbd_tenants_match(&back, ta) == &back.v[0]);
	CHECK(back.v[0].admin && back.v[0].max_sandboxes == 3 && back.v[0].cpu == 2.5 &&
	      back.v[0].memory_mb == 4096 && back.v[0].created_at == 1764680000);
	CHECK(!back.v[1].admin && back.v[1].max_sandboxes == -1 && back.v[1].cpu < 0 &&
	      back.v[1].memory_mb == -1);
	sbd_tenants_done(&back);
	/* writable by others: whoever can write it can make tokens */
	CHECK(chmod(path, 0622) == 0);
	CHECK(sbd_tenants_load(path, &back, NULL, &e) == -EPERM && strstr(e.msg, "chmod 600"));
	sbd_tenants_done(&back);
	CHECK(unlink(path) == 0);
	CHECK(sbd_tenants_load(path, &back, NULL, &e) == -ENOENT);
	sbd_tenants_done(&back);
	sbd_tenants_done(&t);
}

static void test_malformed(void)
{
	static const char *const bad[] = {
	    "",
	    "[]",
	    "{\"version\":2,\"tenants\":[]}",
	    "{\"version\":1}",
	    "{\"version\":1,\"tenants\":[{\"name\":\"A\",\"salt\":\"\",\"hash\":\"\"}]}",
	    "{\"version\":1,\"tenants\":[{\"name\":\"a\",\"salt\":\"zz\",\"hash\":\"00\"}]}",
	    "{\"version\":1,\"tenants\":[{\"name\":\"a\",\"salt\":"
	    "\"00000000000000000000000000000000\","
	    "\"hash\":\"0000000000000000000000000000000000000000000000000000000000000000\","
	    "\"memory_mb\":-5}]}",
	    "{\"version\":1,\"tenants\":[{\"name\":\"a\",\"salt\":"
	    "\"00000000000000000000000000000000\","
	    "\"hash\":\"0000000000000000000000000000000000000000000000000000000000000000\"},"
	    "{\"name\":\"a\",\"salt\":\"00000000000000000000000000000000\","
	    "\"hash\":\"0000000000000000000000000000000000000000000000000000000000000000\"}]}",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		struct sbd_tenants t;
		struct strata_err e = {0};
		CHECK(sbd_tenants_parse(bad[i], strlen(bad[i]), &t, &e) == -EINVAL && e.msg[0]);
		sbd_tenants_done(&t);
	}
}

int main(void)
{
	char dir[] = "/tmp/strata-tenants-XXXXXX";
	if (!mkdtemp(dir))
		return 1;
	test_names();
	test_tokens();
	test_file(dir);
	test_malformed();
	rmdir(dir);
	return 0;
}
