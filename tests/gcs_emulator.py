"""A local Google Cloud Storage for the tests: ``gcp-storage-emulator`` (the ``test`` extra) in
a child process, with three fixes to the emulator itself, where it differs from real GCS in
ways orbax and gcsfs reach (nothing of hybrid_jax is patched):

- downloads carry ``x-goog-generation`` / ``x-goog-metageneration``, as GCS sends them:
  TensorStore's gcs driver takes a read's generation from that header, and without it the
  next conditional write (orbax's OCDBT manifest) fails with "Malformed StorageGeneration";
- media uploads honour ``ifGenerationMatch`` (the stock emulator lets the last writer win);
- ``objects.moveTo`` exists: gcsfs renames with it, and the stock emulator's 501 is retried
  by gcsfs for ~31 s before it falls back to copy and delete.

``start(bucket)`` runs it on a free port and returns the process and the environment a
client process needs (``client_env``); none of those variables is needed on real GCS.
Run as ``python tests/gcs_emulator.py start --port N ...`` it is the emulator's own CLI with
the fixes applied."""

import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from http import HTTPStatus


def client_env(url: str) -> dict:
  """What a process needs to use the emulator at ``url`` instead of GCS, set before it
  imports jax, orbax or gcsfs."""
  return dict(
      STORAGE_EMULATOR_HOST=url,               # gcsfs and google-cloud-storage
      TENSORSTORE_GCS_HTTP_URL=url,            # TensorStore's gcs driver (orbax's arrays)
      GOOGLE_AUTH_TOKEN_FOR_TESTING="dummy",   # TensorStore: no credential lookup
      FSSPEC_GCS_TOKEN="anon",                 # gcsfs: no google.auth.default()
      NO_GCE_CHECK="true",                     # google-auth: no probe of the GCE metadata server
      GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT="false")  # gcsfs: no storage-control gRPC probe


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def start(bucket: str, timeout: float = 20.0):
  """(process, url) of an in-memory emulator holding an empty ``bucket``; the caller
  terminates the process. Its log goes to a file: a pipe nobody reads would fill and stop
  the (single-threaded) emulator in the middle of a request."""
  port = free_port()
  log = tempfile.TemporaryFile()
  proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "start", "--host",
                           "127.0.0.1", "--port", str(port), "--in-memory",
                           "--default-bucket", bucket, "-q"],
                          stdout=subprocess.DEVNULL, stderr=log)
  url = f"http://127.0.0.1:{port}"
  deadline = time.time() + timeout
  while time.time() < deadline and proc.poll() is None:
    try:
      urllib.request.urlopen(f"{url}/storage/v1/b/{bucket}", timeout=1).read()
      return proc, url
    except OSError:
      time.sleep(0.1)
  proc.kill()
  proc.wait()
  log.seek(0)
  raise RuntimeError(f"gcp-storage-emulator did not start: {log.read()[-2000:]!r}")


def _patch():
  """The three fixes (see the module doc); before ``gcp_storage_emulator.server`` is
  imported, which binds the handlers into its routes."""
  from gcp_storage_emulator.exceptions import NotFound
  from gcp_storage_emulator.handlers import objects

  stock_download, stock_insert = objects.download, objects.insert

  def download(request, response, storage, *args, **kwargs):
    try:
      obj = storage.get_file_obj(request.params["bucket_name"], request.params["object_id"])
      response["x-goog-generation"] = str(obj.get("generation") or "1")
      response["x-goog-metageneration"] = str(obj.get("metageneration") or "1")
      response["x-goog-stored-content-length"] = str(obj.get("size") or 0)
    except NotFound:
      pass                                  # the stock handler answers 404
    return stock_download(request, response, storage, *args, **kwargs)

  def insert(request, response, storage, *args, **kwargs):
    q = request.query
    if q.get("uploadType", [""])[0] == "media" and "ifGenerationMatch" in q and "name" in q:
      try:
        have = str(storage.get_file_obj(request.params["bucket_name"], q["name"][0]).get("generation"))
      except NotFound:
        have = "0"                          # GCS: generation 0 means "must not exist"
      if q["ifGenerationMatch"][0] != have:
        response.status = HTTPStatus.PRECONDITION_FAILED
        response.json({"error": {"code": 412, "message": "conditionNotMet"}})
        return
    return stock_insert(request, response, storage, *args, **kwargs)

  def move(request, response, storage, *args, **kwargs):
    bucket, source = request.params["bucket_name"], request.params["object_id"]
    try:
      moved = objects._copy(request.base_url, storage, bucket, source, bucket,
                            request.params["dest_object_id"])
    except NotFound:
      response.status = HTTPStatus.NOT_FOUND
      return
    objects._delete(storage, bucket, source)
    response.json(moved)

  objects.download, objects.insert = download, insert
  from gcp_storage_emulator import server, settings
  routes = tuple((rf"^{p}/b/(?P<bucket_name>[-.\w]+)/o/(?P<object_id>.*[^/]+)/moveTo/o/"
                  rf"(?P<dest_object_id>.*[^/]+)$", {server.POST: move})
                 for p in (settings.API_ENDPOINT, ""))
  server.HANDLERS = routes + tuple(server.HANDLERS)


if __name__ == "__main__":
  _patch()
  from gcp_storage_emulator.__main__ import main
  main(sys.argv[1:])
