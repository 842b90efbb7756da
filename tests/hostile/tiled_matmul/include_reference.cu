// Hostile: includes the course's reference solution by its absolute path (filled in by the test).
#include "@PROJECT_ROOT@/reference/tiled_matmul/reference.cu"
