/* The MPI side of `dynres-bench pmi` (`pmi.rs`): built with MPICH's `mpicc` and run,
 * unmodified, under `dynres run` (PMI-1, `spec/pmi.md`) and under MPICH's `mpiexec`.
 *
 *   pmi_bench hello        MPI_Init, one barrier, MPI_Finalize.
 *   pmi_bench spawn N K    rank 0 of a one-process job spawns N children K times, one
 *                          spawn after the other; each round is MPI_Comm_spawn and an
 *                          MPI_Intercomm_merge with the children (so the children are
 *                          up and connected), then a disconnect; prints
 *                          `spawn <N> <µs>` per round and `total <µs>` for all K.
 *   (child)                a spawned child: merge, disconnect, finalize.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    MPI_Comm parent;
    MPI_Init(&argc, &argv);
    MPI_Comm_get_parent(&parent);
    if (parent != MPI_COMM_NULL) {
        MPI_Comm merged;
        MPI_Intercomm_merge(parent, 1, &merged);
        MPI_Comm_free(&merged);
        MPI_Comm_disconnect(&parent);
        MPI_Finalize();
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "spawn") == 0 && argc > 3) {
        int n = atoi(argv[2]), k = atoi(argv[3]);
        double all = MPI_Wtime();
        for (int r = 0; r < k; r++) {
            MPI_Comm inter, merged;
            double t = MPI_Wtime();
            MPI_Comm_spawn(argv[0], MPI_ARGV_NULL, n, MPI_INFO_NULL, 0, MPI_COMM_SELF, &inter,
                           MPI_ERRCODES_IGNORE);
            MPI_Intercomm_merge(inter, 0, &merged);
            printf("spawn %d %.1f\n", n, (MPI_Wtime() - t) * 1e6);
            MPI_Comm_free(&merged);
            MPI_Comm_disconnect(&inter);
        }
        printf("total %.1f\n", (MPI_Wtime() - all) * 1e6);
    } else {
        MPI_Barrier(MPI_COMM_WORLD);
    }
    MPI_Finalize();
    return 0;
}
