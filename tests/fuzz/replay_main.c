/*
 * Replay driver (R12.2): with gcc, each fuzz harness links this main and
 * runs every file of its corpus once, so crashes ever found stay fixed.
 * Sanitizers (make asan) turn a bad read into a failure. With clang's
 * libFuzzer this file is not linked.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REPLAY_MAX_INPUT (4u << 20)

static int
s_replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return -1;
    }
    uint8_t *data = malloc(REPLAY_MAX_INPUT);
    size_t size = data ? fread(data, 1, REPLAY_MAX_INPUT, f) : 0;
    fclose(f);
    if (data == NULL)
        return -1;
    /* An exact-size copy, so ASan catches a read one past the input. */
    uint8_t *exact = malloc(size ? size : 1);
    if (exact != NULL) {
        memcpy(exact, data, size);
        LLVMFuzzerTestOneInput(exact, size);
    }
    free(exact);
    free(data);
    return exact ? 0 : -1;
}

static int
s_compare_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int
main(int argc, char **argv)
{
    int inputs = 0, errors = 0;
    for (int i = 1; i < argc; i++) {
        DIR *dir = opendir(argv[i]);
        if (dir == NULL) {
            errors += s_replay_file(argv[i]) != 0;
            inputs++;
            continue;
        }
        char *names[4096];
        int count = 0;
        for (struct dirent *e = readdir(dir); e && count < 4096;
             e = readdir(dir))
            if (e->d_name[0] != '.')
                names[count++] = strdup(e->d_name);
        closedir(dir);
        qsort(names, (size_t)count, sizeof names[0], s_compare_names);
        for (int k = 0; k < count; k++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[i], names[k]);
            errors += s_replay_file(path) != 0;
            inputs++;
            free(names[k]);
        }
    }
    printf("replay: %d inputs from %d path(s), %d unreadable\n",
           inputs,
           argc - 1,
           errors);
    return errors != 0 || inputs == 0;
}
