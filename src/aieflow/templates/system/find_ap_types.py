"""Print the folder of Xilinx's open ap_int.h / hls_stream.h as the hls4ml package ships them
(templates/vivado/ap_types), or nothing.  Written by aieflow into the project; imports neither
aieflow nor hls4ml (hls4ml is only located)."""
import importlib.util
from pathlib import Path

spec = importlib.util.find_spec("hls4ml")
for root in (spec.submodule_search_locations or []) if spec else []:
    folder = Path(root) / "templates" / "vivado" / "ap_types"
    if (folder / "ap_int.h").is_file() and (folder / "hls_stream.h").is_file():
        print(folder)
        break
