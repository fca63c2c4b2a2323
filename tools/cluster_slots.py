"""How many thread-block clusters of a given size this GPU runs at once (cuOccupancyMaxActiveClusters).

    python3 tools/cluster_slots.py --threads 1024 --smem 204800 --sizes 1,2,3,4,5,6,7,8

A cluster's CTAs share one GPC, so with one CTA an SM the answer is the sum over GPCs of
floor(SMs in the GPC / size), which the SM count alone does not give: topk_model.CLUSTER_SLOTS_132
holds the answers for the 132-SM H100 / H200 that radix_union's cluster pick uses. The probe asks the
driver for a kernel of the given block and dynamic shared memory (enough of it that one CTA fills an
SM; less lets several CTAs share one, and the CTAs a line prints then exceed the SMs), launched with the
cluster size as a launch attribute. Prints one line a size.
"""

from __future__ import annotations

import argparse
import ctypes

CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4


class _LaunchAttribute(ctypes.Structure):
    # CUlaunchAttribute: the id, padded to 8 bytes, then a 64-byte value union (clusterDim: 3 uints)
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_uint * 16)]


class _LaunchConfig(ctypes.Structure):
    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(_LaunchAttribute)), ("numAttrs", ctypes.c_uint)]


def max_active_clusters(func_ptr: int, size: int, threads: int, smem: int) -> int:
    """The driver's count of clusters of ``size`` CTAs (``threads`` each, ``smem`` dynamic bytes) at once."""
    cuda = ctypes.CDLL("libcuda.so.1")
    attr = _LaunchAttribute()
    attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    attr.value[0], attr.value[1], attr.value[2] = size, 1, 1
    cfg = _LaunchConfig(size, 1, 1, threads, 1, 1, smem, None, ctypes.pointer(attr), 1)
    n = ctypes.c_int(0)
    rc = cuda.cuOccupancyMaxActiveClusters(ctypes.byref(n), ctypes.c_void_p(func_ptr), ctypes.byref(cfg))
    if rc != 0:
        raise RuntimeError(f"cuOccupancyMaxActiveClusters(size={size}): CUresult {rc}")
    return n.value


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1024)
    ap.add_argument("--smem", type=int, default=204800, help="dynamic shared memory a CTA, bytes")
    ap.add_argument("--sizes", default="1,2,3,4,5,6,7,8")
    args = ap.parse_args()
    import cupy as cp

    kern = cp.RawKernel(r'extern "C" __global__ void probe(int* p) { extern __shared__ int s[]; '
                        r'if (p) p[threadIdx.x] = s[threadIdx.x]; }', "probe")
    kern.max_dynamic_shared_size_bytes = args.smem
    kern.attributes   # compiles and loads the module
    ptr = kern.kernel.ptr
    dev = cp.cuda.runtime.getDeviceProperties(0)
    sms = dev["multiProcessorCount"]
    print(f"{dev['name'].decode()}: {sms} SMs, {args.threads} threads and {args.smem} B of dynamic shared memory a CTA")
    for size in (int(s) for s in args.sizes.split(",")):
        n = max_active_clusters(ptr, size, args.threads, args.smem)
        # CTAs, not SMs: where --threads and --smem let several CTAs share an SM, n * size exceeds the SMs
        print(f"cluster size {size}: {n} clusters at once ({n * size} CTAs)")


if __name__ == "__main__":
    main()
