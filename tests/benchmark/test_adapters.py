"""Each patch point of the third-party adapters (`benchmark.adapters`) on the pinned releases:
the urllib3 pools hand every new socket to the watcher, the tf_keras Dropout layer draws its
mask from the generator put in its place, and another release is refused in one line.
(mlperf_logging's patch points: tests/benchmark/test_official_readers.py.)"""
from __future__ import annotations

import http.server
import importlib.metadata
import threading

import pytest

from benchmark.adapters import require_version
from benchmark.errors import UserError


class _Hello(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keeps the connection open between requests

    def do_GET(self):  # noqa: N802 - the handler's protocol
        self.send_response(200)
        self.send_header("Content-Length", "5")
        self.end_headers()
        self.wfile.write(b"hello")

    def log_message(self, *args):
        pass


def test_urllib3_pools_hand_each_new_connection_to_the_watcher():
    import urllib3

    from benchmark.adapters.urllib3 import watched_pool_classes
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    seen = []
    try:
        manager = urllib3.PoolManager()
        manager.pool_classes_by_scheme = watched_pool_classes(
            lambda s: seen.append(s.getpeername()) or s)
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        assert manager.request("GET", url).data == b"hello"
        assert manager.request("GET", url).data == b"hello"  # the kept-alive connection
    finally:
        server.shutdown()
        server.server_close()
    assert seen == [server.server_address]


def test_tf_keras_dropout_draws_its_mask_from_the_generator_put_in_its_place():
    import tensorflow as tf
    import tf_keras

    from benchmark.adapters.tf_keras import DropoutGenerator, replace_dropout_generators

    class Halve(DropoutGenerator):
        def __init__(self, index):
            self.index = index

        def dropout(self, inputs, rate, noise_shape=None):
            return inputs * 0.5 + self.index

    model = tf_keras.Sequential([tf_keras.layers.Dropout(0.3), tf_keras.layers.Dropout(0.3)])
    assert replace_dropout_generators(model, Halve) == 2
    out = model(tf.ones([2, 3]), training=True)
    assert out.numpy().tolist() == [[1.25] * 3] * 2  # (1 * 0.5 + 0) * 0.5 + 1
    assert model(tf.ones([2, 3]), training=False).numpy().tolist() == [[1.0] * 3] * 2


@pytest.mark.parametrize("distribution,supported,installed,accepted", [
    ("urllib3", ("2.",), "2.5.0", True),
    ("urllib3", ("2.",), "3.0.0", False),
    ("tf-keras", ("2.20.1",), "2.20.1", True),
    ("tf-keras", ("2.20.1",), "2.21.0", False),
])
def test_require_version(monkeypatch, distribution, supported, installed, accepted):
    monkeypatch.setattr(importlib.metadata, "version", lambda name: installed)
    if accepted:
        assert require_version(distribution, supported) == installed
    else:
        with pytest.raises(UserError, match=f"^{distribution} {installed} is installed; this "
                                            "harness reaches into"):
            require_version(distribution, supported)


def test_the_installed_releases_are_the_supported_ones():
    from benchmark.adapters import mlperf_logging, tf_keras, urllib3
    for distribution, module in (("mlperf-logging", mlperf_logging), ("tf-keras", tf_keras),
                                 ("urllib3", urllib3)):
        require_version(distribution, module.SUPPORTED)
