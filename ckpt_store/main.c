/* main.c: terarec-ckpt entry point: logging, then the server's main
 * (ckpt_server_main parses the flags, serves until SIGINT or SIGTERM, and maps
 * the status to the exit code with tr_status_exit_code). */
#include "../common/log.h"
#include "server.h"

int main(int argc, char **argv)
{
    tr_log_init();
    return ckpt_server_main(argc, argv);
}
