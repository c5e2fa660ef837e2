/* Host check of the cuBLAS loader (src/backend/cuda/cuda_blas.cu): the library is found or a reason
 * is given, and an explicit DSV4_CUBLAS_LIB that fails is never replaced by another library. Each
 * case runs in a child process (the loader runs once per process). Needs no GPU: only dlopen and
 * dlsym run (exit 0 = pass).
 *   1. DSV4_CUBLAS_LIB = a path that does not exist: not loaded, the reason names the dlopen error;
 *   2. DSV4_CUBLAS_LIB = a real library without cuBLAS's entry points (libm): not loaded, "lacks";
 *   3. unset: loaded exactly when the toolkit's libcublas.so.13 is on this machine (the CUDA build
 *      machines have it; the check says so when it is not). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/cuda/cuda_blas.h"

/* child: 0 = not loaded and the reason contains `want` (or loaded when want == NULL) */
static int child(const char *lib, const char *want) {
    if (lib)
        setenv("DSV4_CUBLAS_LIB", lib, 1);
    else
        unsetenv("DSV4_CUBLAS_LIB");
    const char *why = NULL;
    const bool ok = dsv4_cuda_blas_loaded(&why);
    printf("  DSV4_CUBLAS_LIB=%s: %s%s%s\n", lib ? lib : "(unset)", ok ? "loaded" : "not loaded",
           why && !ok ? ": " : "", why && !ok ? why : "");
    fflush(stdout);
    if (!want) return ok ? 0 : 1;
    return !ok && why && strstr(why, want) ? 0 : 1;
}

static int run(const char *lib, const char *want) {
    const pid_t p = fork();
    if (p == 0) _exit(child(lib, want));
    int st = 0;
    if (p < 0 || waitpid(p, &st, 0) != p) return 1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}

int main(void) {
    int fails = 0;
    fails += run("/nonexistent/libcublas.so.13", "not loaded") != 0;
    void *m = dlopen("libm.so.6", RTLD_NOW | RTLD_LOCAL);
    if (m) {
        dlclose(m);
        fails += run("libm.so.6", "lacks") != 0;
    }
    void *cb = dlopen("libcublas.so.13", RTLD_NOW | RTLD_LOCAL);
    if (!cb) cb = dlopen("/usr/local/cuda/lib64/libcublas.so.13", RTLD_NOW | RTLD_LOCAL);
    if (cb) {
        dlclose(cb);
        fails += run(NULL, NULL) != 0;
    } else {
        printf("  libcublas.so.13 is not on this machine: the default search is not checked\n");
        fails += run(NULL, "not loaded") != 0;
    }
    printf("%s: %d failures\n", fails ? "FAIL" : "PASS", fails);
    return fails ? 1 : 0;
}
