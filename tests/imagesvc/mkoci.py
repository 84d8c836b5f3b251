#!/usr/bin/python3
"""mkoci.py OUT LAYER... — writes an OCI image layout (tag "latest") whose
layers are the given files, as they are (.tar, .tar.gz, .tar.zst by name).
Used by the image tests to build images that share layers, images with big
files, and images whose layer is corrupt but whose digests match (so only
the conversion can find the damage)."""
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys

MT = {".gz": "application/vnd.oci.image.layer.v1.tar+gzip",
      ".zst": "application/vnd.oci.image.layer.v1.tar+zstd"}


def put(out, data):
    d = hashlib.sha256(data).hexdigest()
    with open(os.path.join(out, "blobs", "sha256", d), "wb") as f:
        f.write(data)
    return "sha256:" + d, len(data)


def diff_id(data, ext):
    """sha256 of the uncompressed tar (the config's rootfs.diff_ids)."""
    try:
        if ext == ".gz":
            data = gzip.decompress(data)
        elif ext == ".zst":
            data = subprocess.run(["zstd", "-dc"], input=data, capture_output=True,
                                  check=True).stdout
    except Exception:  # a deliberately corrupt layer: any diff_id will do
        pass
    return "sha256:" + hashlib.sha256(data).hexdigest()


def main():
    out, layers = sys.argv[1], sys.argv[2:]
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(os.path.join(out, "blobs", "sha256"))
    descs, diffs = [], []
    for path in layers:
        data = open(path, "rb").read()
        dg, size = put(out, data)
        ext = os.path.splitext(path)[1]
        descs.append({"mediaType": MT.get(ext, "application/vnd.oci.image.layer.v1.tar"),
                      "digest": dg, "size": size})
        diffs.append(diff_id(data, ext))
    config = {"architecture": "amd64", "os": "linux",
              "config": {"Cmd": ["/bin/sh"]},
              "rootfs": {"type": "layers", "diff_ids": diffs}}
    cd, cs = put(out, json.dumps(config).encode())
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                           "digest": cd, "size": cs},
                "layers": descs}
    md, ms = put(out, json.dumps(manifest).encode())
    index = {"schemaVersion": 2, "manifests": [
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": md, "size": ms,
         "annotations": {"org.opencontainers.image.ref.name": "latest"},
         "platform": {"architecture": "amd64", "os": "linux"}}]}
    with open(os.path.join(out, "index.json"), "w") as f:
        json.dump(index, f)
    with open(os.path.join(out, "oci-layout"), "w") as f:
        json.dump({"imageLayoutVersion": "1.0.0"}, f)
    print(md)


if __name__ == "__main__":
    main()
