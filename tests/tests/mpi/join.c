#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
int main(int argc, char **argv) {
    int rank, fd = -1, v = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    struct sockaddr_in a; memset(&a, 0, sizeof a);
    a.sin_family = AF_INET; a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    int port = 0;
    if (rank == 0) {
        int l = socket(AF_INET, SOCK_STREAM, 0);
        bind(l, (struct sockaddr *)&a, sizeof a); listen(l, 1);
        getsockname(l, (struct sockaddr *)&a, &len); port = ntohs(a.sin_port);
        MPI_Bcast(&port, 1, MPI_INT, 0, MPI_COMM_WORLD);
        fd = accept(l, NULL, NULL); close(l);
    } else if (rank == 1) {
        MPI_Bcast(&port, 1, MPI_INT, 0, MPI_COMM_WORLD);
        a.sin_port = htons(port);
        fd = socket(AF_INET, SOCK_STREAM, 0);
        while (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) usleep(1000);
    }
    MPI_Comm inter;
    MPI_Comm_join(fd, &inter);
    if (rank == 0) { v = 7; MPI_Send(&v, 1, MPI_INT, 0, 0, inter); }
    else MPI_Recv(&v, 1, MPI_INT, 0, 0, inter, MPI_STATUS_IGNORE);
    int rs; MPI_Comm_remote_size(inter, &rs);
    printf("join rank=%d remote=%d v=%d\n", rank, rs, v);
    MPI_Comm_disconnect(&inter); close(fd);
    MPI_Finalize();
    return 0;
}
