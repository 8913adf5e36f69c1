/* prepare.c: placeholder until the preprocessor lands; refuses to run. */
#include "prepare.h"

#include "../common/log.h"

int prepare_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    LOG_ERROR("'terarec data prepare' is not built yet");
    return 1;
}
