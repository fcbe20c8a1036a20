/* loadgen: a small librdkafka load generator for bench/e2e/run.py.
 *
 *   loadgen produce -b HOST:PORT -t TOPIC -n N [-s SIZE] [-p PARTS] [-a ACKS] [-z CODEC] [-r RATE]
 *   loadgen consume -b HOST:PORT -t TOPIC -n N [-p PARTS]
 *   loadgen latency -b HOST:PORT -t TOPIC -n N -r RATE [-s SIZE] [-p PARTS] [-a ACKS] [-z CODEC]
 *                   [-w WARMUP]
 *   (every mode also takes -X key=value, a librdkafka property for each client it creates,
 *    and -S FILE: the consumer's last librdkafka statistics JSON is written to FILE at the end,
 *    statistics being emitted every second)
 *
 * produce: N records of SIZE bytes (no key), record i to partition i % PARTS, as fast as
 *          librdkafka takes them (or RATE records/s); the clock stops when every delivery
 *          report is in.
 * consume: assigns partitions 0..PARTS-1 from the beginning (no group join) and reads until
 *          N records; the clock runs from the first record to the N-th (startup_s: from the
 *          assign to the first record).
 * latency: a consumer thread reads the (fresh) topic from the beginning while the main thread
 *          produces N records at RATE records/s, each value starting with its send time
 *          (CLOCK_MONOTONIC ns) and sequence number. Latency = receive time - send time for
 *          every record after the first WARMUP (default: one second's worth).
 *
 * Values are slices of a 1 MiB pool of pseudo-random words (lz4 shrinks them about 2x, so
 * "lz4" runs measure something between incompressible and Kafka's perf tool's one repeated
 * value). The payload is passed without RD_KAFKA_MSG_F_COPY: the pool outlives every message.
 *
 * Output: one JSON object on stdout; diagnostics on stderr; exit 1 on any delivery error or
 * if the records do not all arrive before a 30 s stall.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>

#define POOL_SIZE (1 << 20)
#define STALL_NS (30ull * 1000000000ull)

static char pool[POOL_SIZE];

static struct {
    const char *mode, *brokers, *topic, *acks, *codec;
    long n, size, parts, rate, warmup;
    const char *extra[16]; /* -X key=value: librdkafka properties for every client */
    const char *stats_path; /* -S FILE: the consumer's last statistics JSON */
    int n_extra;
} opt = {.acks = "1", .codec = "none", .size = 100, .parts = 6, .warmup = -1};

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_until(uint64_t t) {
    struct timespec ts = {.tv_sec = (time_t)(t / 1000000000ull), .tv_nsec = (long)(t % 1000000000ull)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}

static void die(const char *what, const char *why) {
    fprintf(stderr, "loadgen: %s: %s\n", what, why);
    exit(2);
}

static void fill_pool(void) {
    /* 256 words of 2-9 letters from a fixed LCG: text-like, moderately compressible */
    char words[256][10];
    uint32_t x = 12345;
    for (int w = 0; w < 256; w++) {
        x = x * 1103515245u + 12345u;
        int len = 2 + (int)((x >> 16) % 8);
        for (int i = 0; i < len; i++) {
            x = x * 1103515245u + 12345u;
            words[w][i] = (char)('a' + (x >> 16) % 26);
        }
        words[w][len] = 0;
    }
    size_t pos = 0;
    while (pos < POOL_SIZE) {
        x = x * 1103515245u + 12345u;
        const char *word = words[(x >> 16) & 255];
        for (size_t i = 0; word[i] && pos < POOL_SIZE; i++) pool[pos++] = word[i];
        if (pos < POOL_SIZE) pool[pos++] = ' ';
    }
}

static char *payload(long i) { return pool + ((size_t)i * (size_t)opt.size) % (POOL_SIZE - (size_t)opt.size); }

static void set(rd_kafka_conf_t *conf, const char *key, const char *value) {
    char err[256];
    if (rd_kafka_conf_set(conf, key, value, err, sizeof err) != RD_KAFKA_CONF_OK) die(key, err);
}

/* ---- producer ---------------------------------------------------------------------------- */

static long delivered, delivery_errors;
static char first_error[256];

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
    (void)rk;
    (void)opaque;
    if (m->err) {
        if (!delivery_errors++) snprintf(first_error, sizeof first_error, "%s", rd_kafka_err2str(m->err));
    } else {
        delivered++;
    }
}

static void set_extra(rd_kafka_conf_t *conf) {
    for (int i = 0; i < opt.n_extra; i++) {
        char kv[512], *eq;
        snprintf(kv, sizeof kv, "%s", opt.extra[i]);
        if (!(eq = strchr(kv, '='))) die("-X", "expected key=value");
        *eq = 0;
        set(conf, kv, eq + 1);
    }
}

static rd_kafka_t *new_producer(int latency) {
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    set(conf, "bootstrap.servers", opt.brokers);
    set(conf, "acks", opt.acks);
    set(conf, "compression.codec", opt.codec);
    /* throughput: big batches; latency: send each record at once */
    set(conf, "linger.ms", latency ? "0" : "5");
    set(conf, "batch.num.messages", "100000");
    set(conf, "batch.size", "1000000");
    set(conf, "queue.buffering.max.messages", "1000000");
    set(conf, "queue.buffering.max.kbytes", "1048576");
    set(conf, "socket.nagle.disable", "true");
    set(conf, "message.timeout.ms", "60000");
    set_extra(conf);
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    if (!rk) die("rd_kafka_new(producer)", err);
    return rk;
}

static void produce_one(rd_kafka_t *rk, rd_kafka_topic_t *rkt, long i, char *value, int flags) {
    while (rd_kafka_produce(rkt, (int32_t)(i % opt.parts), flags, value, (size_t)opt.size, NULL, 0,
                            NULL) == -1) {
        rd_kafka_resp_err_t e = rd_kafka_last_error();
        if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL) die("produce", rd_kafka_err2str(e));
        rd_kafka_poll(rk, 1); /* queue full: let delivery reports drain it */
    }
}

/* Produces opt.n records (paced when opt.rate > 0); returns the elapsed ns incl. flush. */
static uint64_t run_producer(rd_kafka_t *rk, int stamped) {
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, opt.topic, NULL);
    char *stamped_values = NULL;
    if (stamped) {
        stamped_values = malloc((size_t)opt.n * (size_t)opt.size);
        if (!stamped_values) die("malloc", strerror(errno));
    }
    uint64_t start = now_ns();
    for (long i = 0; i < opt.n; i++) {
        if (opt.rate > 0) {
            uint64_t due = start + (uint64_t)((double)i * 1e9 / (double)opt.rate);
            if (now_ns() < due) sleep_until(due);
        }
        char *value = payload(i);
        if (stamped) { /* [send ns][seq] then filler: each record has its own buffer */
            value = stamped_values + (size_t)i * (size_t)opt.size;
            memcpy(value, payload(i), (size_t)opt.size);
            uint64_t t = now_ns(), seq = (uint64_t)i;
            memcpy(value, &t, 8);
            memcpy(value + 8, &seq, 8);
        }
        produce_one(rk, rkt, i, value, 0);
        if ((i & 1023) == 0 || opt.rate > 0) rd_kafka_poll(rk, 0);
    }
    rd_kafka_resp_err_t fe = rd_kafka_flush(rk, 120000);
    uint64_t elapsed = now_ns() - start;
    if (fe) die("flush", rd_kafka_err2str(fe));
    rd_kafka_topic_destroy(rkt);
    free(stamped_values); /* every message is delivered: librdkafka no longer points into it */
    return elapsed;
}

/* ---- consumer ---------------------------------------------------------------------------- */

/* The latest statistics JSON (librdkafka calls this from rd_kafka_consume_batch_queue / poll,
 * on the application thread). */
static char *last_stats;
static int on_stats(rd_kafka_t *rk, char *json, size_t len, void *opaque) {
    (void)rk;
    (void)len;
    (void)opaque;
    free(last_stats);
    last_stats = json;
    return 1; /* we keep the buffer */
}

static void write_stats(void) {
    if (!opt.stats_path || !last_stats) return;
    FILE *f = fopen(opt.stats_path, "w");
    if (!f) die(opt.stats_path, strerror(errno));
    fputs(last_stats, f);
    fclose(f);
}

static rd_kafka_t *new_consumer(int latency) {
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    set(conf, "bootstrap.servers", opt.brokers);
    set(conf, "group.id", "loadgen"); /* required by the consumer API; never joined (assign) */
    set(conf, "enable.auto.commit", "false");
    set(conf, "enable.partition.eof", "false");
    set(conf, "auto.offset.reset", "earliest");
    set(conf, "socket.nagle.disable", "true");
    set(conf, "fetch.wait.max.ms", latency ? "500" : "100");
    set(conf, "queued.min.messages", "1000000");
    set(conf, "queued.max.messages.kbytes", "262144");
    if (opt.stats_path) {
        set(conf, "statistics.interval.ms", "1000");
        rd_kafka_conf_set_stats_cb(conf, on_stats);
    }
    set_extra(conf);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
    if (!rk) die("rd_kafka_new(consumer)", err);
    rd_kafka_poll_set_consumer(rk);
    rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new((int)opt.parts);
    for (int p = 0; p < opt.parts; p++)
        rd_kafka_topic_partition_list_add(parts, opt.topic, p)->offset = RD_KAFKA_OFFSET_BEGINNING;
    rd_kafka_resp_err_t e = rd_kafka_assign(rk, parts);
    if (e) die("assign", rd_kafka_err2str(e));
    rd_kafka_topic_partition_list_destroy(parts);
    return rk;
}

static int record_latency(const rd_kafka_message_t *m);


/* Reads until `want` records that on_record counts (returns 1; NULL: all count).
 * Returns the count (< want: stalled for 30 s). */
static uint64_t first_record_ns; /* when the first record arrived */

static long run_consumer(rd_kafka_t *rk, long want, int (*on_record)(const rd_kafka_message_t *)) {
    rd_kafka_queue_t *q = rd_kafka_queue_get_consumer(rk);
    rd_kafka_message_t *batch[4096];
    long got = 0;
    uint64_t last_progress = now_ns();
    while (got < want) {
        /* the batch call waits until its array is full or the timeout: fine for throughput,
         * but a latency probe must see each record as soon as librdkafka has it */
        ssize_t k;
        if (on_record == record_latency) {
            batch[0] = rd_kafka_consumer_poll(rk, 100);
            k = batch[0] != NULL;
        } else {
            k = rd_kafka_consume_batch_queue(q, 100, batch, 4096);
        }
        for (ssize_t j = 0; j < k; j++) {
            rd_kafka_message_t *m = batch[j];
            if (m->err) {
                fprintf(stderr, "loadgen: consume: %s\n", rd_kafka_message_errstr(m));
            } else {
                if (!first_record_ns) first_record_ns = now_ns();
                got += on_record ? on_record(m) : 1;
            }
            rd_kafka_message_destroy(m);
        }
        if (k > 0)
            last_progress = now_ns();
        else if (now_ns() - last_progress > STALL_NS)
            break;
    }
    rd_kafka_queue_destroy(q);
    return got;
}

/* ---- latency ----------------------------------------------------------------------------- */

#define PROBE_SEQ UINT64_MAX

static uint64_t *latency_ns; /* by sequence number; 0 = not (yet) received */
static rd_kafka_t *latency_consumer;
static long latency_got;
static volatile int consumer_ready; /* set once a probe record came back */

static int record_latency(const rd_kafka_message_t *m) {
    uint64_t t, seq, now = now_ns();
    if (m->len < 16) return 0;
    memcpy(&t, m->payload, 8);
    memcpy(&seq, (const char *)m->payload + 8, 8);
    if (seq == PROBE_SEQ) {
        __atomic_store_n(&consumer_ready, 1, __ATOMIC_RELEASE);
        return 0;
    }
    if (seq < (uint64_t)opt.n) latency_ns[seq] = now - t;
    return 1;
}

/* The consumer's first fetches (metadata, offsets, backoff on an empty partition) can take
 * seconds; send probe records until one comes back so that no paced record waits for that. */
static void wait_consumer_ready(rd_kafka_t *rk) {
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, opt.topic, NULL);
    uint64_t deadline = now_ns() + STALL_NS;
    for (long p = 0; !__atomic_load_n(&consumer_ready, __ATOMIC_ACQUIRE); p++) {
        if (now_ns() > deadline) die("latency", "consumer saw no probe record in 30 s");
        char probe[16];
        uint64_t t = now_ns(), seq = PROBE_SEQ;
        memcpy(probe, &t, 8);
        memcpy(probe + 8, &seq, 8);
        if (rd_kafka_produce(rkt, (int32_t)(p % opt.parts), RD_KAFKA_MSG_F_COPY, probe, 16, NULL, 0,
                             NULL) == -1)
            die("probe", rd_kafka_err2str(rd_kafka_last_error()));
        rd_kafka_poll(rk, 100);
    }
    rd_kafka_flush(rk, 10000);
    rd_kafka_topic_destroy(rkt);
}

static void *latency_consumer_main(void *arg) {
    (void)arg;
    latency_got = run_consumer(latency_consumer, opt.n, record_latency);
    return NULL;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static double pct_ms(const uint64_t *sorted, long count, double q) {
    long i = (long)ceil(q * (double)count) - 1;
    if (i < 0) i = 0;
    return (double)sorted[i] / 1e6;
}

/* ---- main -------------------------------------------------------------------------------- */

static void usage(void) {
    fprintf(stderr,
            "usage: loadgen produce|consume|latency -b BROKERS -t TOPIC -n N [-s SIZE] [-p PARTS]\n"
            "               [-a ACKS] [-z none|lz4|...] [-r RATE] [-w WARMUP]\n"
            "               [-X librdkafka.property=value ...]\n");
    exit(2);
}

int main(int argc, char **argv) {
    if (argc < 2) usage();
    opt.mode = argv[1];
    int c;
    optind = 2;
    while ((c = getopt(argc, argv, "b:t:n:s:p:a:z:r:w:X:S:")) != -1) {
        switch (c) {
        case 'b': opt.brokers = optarg; break;
        case 't': opt.topic = optarg; break;
        case 'n': opt.n = atol(optarg); break;
        case 's': opt.size = atol(optarg); break;
        case 'p': opt.parts = atol(optarg); break;
        case 'a': opt.acks = optarg; break;
        case 'z': opt.codec = optarg; break;
        case 'r': opt.rate = atol(optarg); break;
        case 'w': opt.warmup = atol(optarg); break;
        case 'S': opt.stats_path = optarg; break;
        case 'X':
            if (opt.n_extra == 16) usage();
            opt.extra[opt.n_extra++] = optarg;
            break;
        default: usage();
        }
    }
    if (!opt.brokers || !opt.topic || opt.n <= 0 || opt.parts <= 0 || opt.size < 16 ||
        opt.size > POOL_SIZE / 2)
        usage();
    fill_pool();
    double mb = (double)opt.n * (double)opt.size / 1e6;

    if (!strcmp(opt.mode, "produce")) {
        rd_kafka_t *rk = new_producer(0);
        double s = (double)run_producer(rk, 0) / 1e9;
        rd_kafka_destroy(rk);
        printf("{\"mode\": \"produce\", \"records\": %ld, \"seconds\": %.6f, \"records_per_s\": %.1f, "
               "\"mb_per_s\": %.2f, \"delivered\": %ld, \"errors\": %ld, \"first_error\": \"%s\"}\n",
               opt.n, s, (double)opt.n / s, mb / s, delivered, delivery_errors, first_error);
        return delivery_errors || delivered != opt.n;
    }
    if (!strcmp(opt.mode, "consume")) {
        rd_kafka_t *rk = new_consumer(0);
        uint64_t start = now_ns();
        long got = run_consumer(rk, opt.n, NULL);
        uint64_t end = now_ns();
        /* the rate counts from the first record: the time before it is the client's start-up
         * (metadata, offsets, the first fetch), reported as startup_s */
        double startup = first_record_ns ? (double)(first_record_ns - start) / 1e9 : 0;
        double s = first_record_ns ? (double)(end - first_record_ns) / 1e9 : (double)(end - start) / 1e9;
        if (opt.stats_path) { /* one more statistics round, with the final counts */
            rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 1100);
            if (m) rd_kafka_message_destroy(m);
        }
        write_stats();
        rd_kafka_consumer_close(rk);
        rd_kafka_destroy(rk);
        printf("{\"mode\": \"consume\", \"records\": %ld, \"seconds\": %.6f, \"records_per_s\": %.1f, "
               "\"mb_per_s\": %.2f, \"startup_s\": %.3f}\n",
               got, s, (double)got / s, (double)got * (double)opt.size / 1e6 / s, startup);
        return got != opt.n;
    }
    if (!strcmp(opt.mode, "latency")) {
        if (opt.rate <= 0) usage();
        if (opt.warmup < 0) opt.warmup = opt.rate; /* one second */
        if (opt.warmup >= opt.n) usage();
        latency_ns = calloc((size_t)opt.n, sizeof *latency_ns);
        latency_consumer = new_consumer(1);
        pthread_t th;
        pthread_create(&th, NULL, latency_consumer_main, NULL);
        rd_kafka_t *rk = new_producer(1);
        uint64_t t0 = now_ns();
        wait_consumer_ready(rk);
        double ready_s = (double)(now_ns() - t0) / 1e9;
        run_producer(rk, 1);
        pthread_join(th, NULL);
        rd_kafka_destroy(rk);
        rd_kafka_consumer_close(latency_consumer);
        rd_kafka_destroy(latency_consumer);
        long count = 0;
        for (long i = opt.warmup; i < opt.n; i++)
            if (latency_ns[i]) latency_ns[count++] = latency_ns[i];
        if (!count) die("latency", "no records received");
        qsort(latency_ns, (size_t)count, sizeof *latency_ns, cmp_u64);
        printf("{\"mode\": \"latency\", \"rate\": %ld, \"records\": %ld, \"measured\": %ld, "
               "\"p50_ms\": %.3f, \"p99_ms\": %.3f, \"p999_ms\": %.3f, \"max_ms\": %.3f, "
               "\"errors\": %ld, \"consumer_ready_s\": %.3f}\n",
               opt.rate, latency_got, count, pct_ms(latency_ns, count, 0.50),
               pct_ms(latency_ns, count, 0.99), pct_ms(latency_ns, count, 0.999),
               (double)latency_ns[count - 1] / 1e6, delivery_errors, ready_s);
        return delivery_errors || latency_got != opt.n;
    }
    usage();
}
