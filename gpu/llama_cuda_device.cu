/* llama_cuda_device.cu - which CUDA device a thread works on: the count of
 * visible devices and the calling thread's current device. A lz_llama_gpu
 * lives on the device current when lz_llama_gpu_new ran; every thread that
 * calls it must make that device current first (CUDA's current device is a
 * property of the host thread), as the ingest and serving engines do for
 * their own threads. */
#include <stdio.h>

#include <cuda_runtime.h>

#include "gpu/llama_cuda.h"

extern "C" int lz_llama_gpu_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* no driver or no device: not sticky, cleared */
        return 0;
    }
    return n;
}

extern "C" int lz_llama_gpu_use_device(int dev, char *err, size_t errlen)
{
    const cudaError_t e = cudaSetDevice(dev);
    if (e != cudaSuccess) {
        cudaGetLastError();
        snprintf(err, errlen, "GPU %d: %s", dev, cudaGetErrorString(e));
        return -1;
    }
    return 0;
}
