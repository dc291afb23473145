"""The streamed Dense layer's XRT host (``host/dense_host.cpp``): aieflow's x86 shim has no XRT
headers, so the host stays out of the x86 build; here it is compiled syntax-only against a
throw-away stub with the signatures of the XRT native API it uses (XRT docs, ``xrt_bo.h``:
``xrt::bo(device, size, memory_group)``, ``memory_group`` = ``uint32_t``, ``kernel::group_id(int)``,
``bo::map<T>()``, ``bo::sync(xclBOSyncDirection)``, the variadic ``kernel::operator()``;
``experimental/xrt_graph.h``: ``graph(device, uuid, name)``, ``run(int)``, ``wait()``)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import torch

import aieflow
from aieflow.gemm.dense import plan_streamed
from aieflow.gemm.dense_design import StreamedDenseDesign

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")]

_XRT_STUB = """#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
enum xclBOSyncDirection { XCL_BO_SYNC_BO_TO_DEVICE, XCL_BO_SYNC_BO_FROM_DEVICE };
namespace xrt {
using memory_group = std::uint32_t;
class uuid {};
class device {
public:
    explicit device(unsigned int) {}
    uuid load_xclbin(const std::string&) { return {}; }
};
class bo {
public:
    bo() = default;
    bo(const device&, std::size_t, memory_group) {}
    template <typename MapType> MapType map() { return nullptr; }
    void sync(xclBOSyncDirection) {}
};
class run {
public:
    void wait() {}
};
class kernel {
public:
    kernel(const device&, const uuid&, const std::string&) {}
    int group_id(int) const { return 0; }
    template <typename... Args> run operator()(Args&&...) { return {}; }
};
class graph {
public:
    graph(const device&, const uuid&, const std::string&) {}
    void run(int) {}
    void wait() {}
};
}  // namespace xrt
"""


@pytest.mark.parametrize("orientation,precision", [("xw", "int8"), ("wx", "a16w8")])
def test_dense_host_is_rendered_and_compiles_against_the_xrt_signatures(tmp_path, orientation, precision):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(40, 24), torch.nn.ReLU()).eval()
    d = aieflow.compile(model, device="vck190", example_input=torch.randn(8, 40),
                        config={"precision": precision, "layers": {"0": {"weights": "streamed"}}})
    plan = plan_streamed(d.graph, d.device, d.config, d.node, d.plan.reason, orientation=orientation)
    d = StreamedDenseDesign(d.graph, d.device, d.config, plan, d.source)
    host = d.files["host/dense_host.cpp"]
    assert "xrt::bo" in host and '"dense_epilogue"' in host and "gemm_five_loops(sys, m, n, k)" in host
    assert f"constexpr bool TRANSPOSED = {'true' if orientation == 'wx' else 'false'}" in host
    # one nullptr per stream port of the mover (Ar + Br) and of the write-back (Cr), as system.cfg connects
    mover_line = next(line for line in host.splitlines() if "return mover(" in line)
    collect_line = next(line for line in host.splitlines() if "collect(c, m, n" in line)
    assert mover_line.count("nullptr") == d.plan.gemm.plio_in
    assert collect_line.count("nullptr") == d.plan.gemm.plio_out
    assert host.count("int16_t;  // the layer's input codes") == (precision == "a16w8")
    d.save(tmp_path / "out")
    stub = tmp_path / "xrt"
    (stub / "xrt").mkdir(parents=True)
    (stub / "experimental").mkdir()
    (stub / "xrt" / "xrt_bo.h").write_text(_XRT_STUB)
    for name in ("xrt/xrt_device.h", "xrt/xrt_kernel.h", "experimental/xrt_graph.h"):
        (stub / name).write_text('#pragma once\n#include "xrt/xrt_bo.h"\n')
    proj = tmp_path / "out" / "project"
    r = subprocess.run(["g++", "-std=c++17", "-fsyntax-only", "-Wall", "-Wextra", "-Werror", f"-I{stub}",
                        f"-I{proj / 'src'}", f"-I{proj}", f"-I{proj / 'pl'}", str(proj / "host" / "dense_host.cpp")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
