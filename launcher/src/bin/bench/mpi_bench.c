/* The MPI libraries' side of `dynres-bench mpi` (`mpi.rs`): the bench builds this with
 * each library's `mpicc` and runs it under that library's launcher, next to dynres'
 * built-in examples that do the same (`hello`, `latency`).
 *
 *   mpi_bench hello           MPI_Init, one barrier, MPI_Finalize; rank 0 prints
 *                             `hello: <size> processes` (dynres: `--example hello`).
 *   mpi_bench pingpong ROUNDS ranks 0 and 1 ping-pong 1 B and 1 MiB; rank 0 prints
 *                             `latency <bytes> <µs>` per size: the median over ROUNDS
 *                             rounds of a round's mean half round trip, after one
 *                             round of warm-up (dynres: `--example latency`, the same
 *                             sizes, iterations and statistic).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const long SIZES[] = {1, 1024 * 1024};

/* Round trips per round: as in latency.rs. */
static long iters(long size) { return size <= 1024 ? 2000 : 100; }

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int pingpong(int rank, int rounds) {
    char *buf = malloc(1024 * 1024);
    if (!buf) return 1;
    memset(buf, 7, 1024 * 1024);
    double *t = malloc(sizeof(double) * (size_t)rounds);
    if (!t) return 1;
    for (size_t i = 0; i < sizeof SIZES / sizeof SIZES[0]; i++) {
        long size = SIZES[i], n = iters(size);
        for (int r = -1; r < rounds; r++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double start = MPI_Wtime();
            for (long k = 0; k < n; k++) {
                if (rank == 0) {
                    MPI_Send(buf, (int)size, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
                    MPI_Recv(buf, (int)size, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                } else if (rank == 1) {
                    MPI_Recv(buf, (int)size, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    MPI_Send(buf, (int)size, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
                }
            }
            if (r >= 0) t[r] = (MPI_Wtime() - start) * 1e6 / (double)n / 2.0;
        }
        if (rank == 0) {
            qsort(t, (size_t)rounds, sizeof(double), cmp);
            double med = rounds % 2 ? t[rounds / 2] : (t[rounds / 2 - 1] + t[rounds / 2]) / 2.0;
            printf("latency %ld %.3f\n", size, med);
            fflush(stdout);
        }
    }
    free(t);
    free(buf);
    return 0;
}

int main(int argc, char **argv) {
    int rank, size, rc = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *mode = argc > 1 ? argv[1] : "hello";
    if (strcmp(mode, "hello") == 0) {
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0) printf("hello: %d processes\n", size);
    } else if (strcmp(mode, "pingpong") == 0 && size >= 2) {
        int rounds = argc > 2 ? atoi(argv[2]) : 5;
        rc = pingpong(rank, rounds < 1 ? 1 : rounds);
    } else {
        if (rank == 0) fprintf(stderr, "usage: mpi_bench hello | pingpong ROUNDS (2+ processes)\n");
        rc = 2;
    }
    MPI_Finalize();
    return rc;
}
