// Known wrong: the kernel never terminates (a loop whose exit condition can never hold).
__global__ void spin(float* P, int width) {
    volatile int i = 0;
    while (i >= 0) i = (i + 1) & 0x3fffffff;
    P[0] = (float)i;
}

extern "C" void matmul(const float* M, const float* N, float* P, int width) {
    spin<<<1, 1>>>(P, width);
}
