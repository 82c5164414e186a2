/* Open MPI / MPICH reference ping-pong for the `pingpong` bench's `--compare` table.
 *
 * The bench compiles this with `mpicc` when one is installed and runs it under
 * `mpirun -np 2` with one transport forced (`--mca btl tcp,self` or `vader,self`), so
 * the MPI library's figures come from the same run as the device's. It uses the same
 * sizes, sample counts, batching and buffers as the Rust bench (see `iters`, `batch`,
 * `dev_ping` and `dev_pong` there: rank 0 sends from one buffer and receives into
 * another, rank 1 echoes from the buffer it received into — at 1 MiB the number of
 * buffers decides what stays in a 1 MiB L2 cache, so it must match) and
 * prints one line per size, `<bytes> <one-way median in microseconds>` (the median over
 * rounds of each round's median, as the bench's summary), then `stream <GB/s>` for
 * streaming `mb` 1 MiB messages rank 0 -> rank 1 followed by a 1-byte ack.
 *
 * Usage: mpi_pingpong <rounds> <mb>
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const long SIZES[] = {1, 64, 1024, 8 * 1024, 64 * 1024, 1024 * 1024};

static long iters(long size) {
    long n = 64L * 1024 * 1024 / (size > 4096 ? size : 4096);
    return n < 64 ? 64 : (n > 20000 ? 20000 : n);
}

static long batch(long size) { return size <= 1024 ? 16 : 1; }

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, long n) {
    qsort(v, n, sizeof(double), cmp);
    return v[n / 2];
}

int main(int argc, char **argv) {
    int rank, rounds = argc > 1 ? atoi(argv[1]) : 3, mb = argc > 2 ? atoi(argv[2]) : 256;
    if (rounds < 1) rounds = 1;
    if (mb < 1) mb = 1;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    char *buf = malloc(1024 * 1024), *back = malloc(1024 * 1024);
    memset(buf, 7, 1024 * 1024);
    memset(back, 0, 1024 * 1024);
    for (size_t i = 0; i < sizeof SIZES / sizeof SIZES[0]; i++) {
        long size = SIZES[i], b = batch(size);
        long n = iters(size) / b;
        if (n < 1) n = 1;
        long warm = n / 10;
        double *samples = malloc(sizeof(double) * n);
        double *per_round = malloc(sizeof(double) * rounds);
        for (int r = 0; r < rounds; r++) {
            long k = 0;
            for (long s = 0; s < warm + n; s++) {
                double t = MPI_Wtime();
                for (long j = 0; j < b; j++) {
                    if (rank == 0) {
                        MPI_Send(buf, size, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
                        MPI_Recv(back, size, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    } else {
                        MPI_Recv(buf, size, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                        MPI_Send(buf, size, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
                    }
                }
                if (s >= warm) samples[k++] = (MPI_Wtime() - t) / b / 2 * 1e6;
            }
            per_round[r] = median(samples, k);
        }
        if (rank == 0) {
            printf("%ld %.4f\n", size, median(per_round, rounds));
            fflush(stdout);
        }
        free(samples);
        free(per_round);
    }
    double *bw = malloc(sizeof(double) * rounds);
    char ack = 1;
    for (int r = 0; r < rounds; r++) {
        double t = MPI_Wtime();
        for (int m = 0; m < mb; m++) {
            if (rank == 0)
                MPI_Send(buf, 1024 * 1024, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
            else
                MPI_Recv(buf, 1024 * 1024, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
        if (rank == 0)
            MPI_Recv(&ack, 1, MPI_BYTE, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        else
            MPI_Send(&ack, 1, MPI_BYTE, 0, 2, MPI_COMM_WORLD);
        bw[r] = mb * 1024.0 * 1024.0 / 1e9 / (MPI_Wtime() - t);
    }
    if (rank == 0) printf("stream %.4f\n", median(bw, rounds));
    free(bw);
    free(buf);
    free(back);
    MPI_Finalize();
    return 0;
}
