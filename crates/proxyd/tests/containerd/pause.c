/* The pod sandbox's process for the containerd test tier: it holds the
 * sandbox's namespaces and sleeps until it is told to stop, as the
 * kubelet's pause image does. Built static: the image has nothing else. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) { (void)sig; _exit(0); }

static void reap(int sig) {
    (void)sig;
    while (waitpid(-1, 0, WNOHANG) > 0) {
    }
}

int main(void) {
    signal(SIGTERM, stop);
    signal(SIGINT, stop);
    signal(SIGCHLD, reap);
    for (;;) pause();
}
