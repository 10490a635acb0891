/* idx2png: turns an MNIST-style idx data set (gzip'd idx3 images + idx1 labels) into the
 * class-folder tree of 8-bit grayscale PNGs that `qforge calib/eval --images DIR` reads:
 * OUTDIR/<k>_<class>/<NNNNN>.png, NNNNN being the image's index in the idx file. */
#include <errno.h>
#include <limits.h>
#include <png.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#define IDX3_MAGIC 0x00000803u /* unsigned bytes, 3 dims */
#define IDX1_MAGIC 0x00000801u /* unsigned bytes, 1 dim */
#define MAX_ITEMS 10000000u    /* far above any idx data set; bounds the label buffer */
#define MAX_SIDE 1024u         /* MNIST-family images are 28x28 */
#define MAX_CLASSES 256u       /* labels are bytes */
#define MAX_NAME 200u

static const char *const builtin_classes[] = {
	"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
	"Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
};

static void die(const char *path, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "idx2png: %s: ", path);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

/* zlib prefixes its messages with the path, which die() already prints. */
static const char *zmsg(const char *path, const char *msg)
{
	size_t n = strlen(path);
	if (strncmp(msg, path, n) == 0 && msg[n] == ':' && msg[n + 1] == ' ')
		return msg + n + 2;
	return msg;
}

/* Reads exactly n bytes or dies; a short read is "truncated" unless zlib saw an error. */
static void read_exact(gzFile gz, const char *path, void *buf, size_t n, const char *what)
{
	unsigned char *p = buf;
	while (n > 0) {
		unsigned chunk = n > (1u << 20) ? 1u << 20 : (unsigned)n;
		int got = gzread(gz, p, chunk);
		if (got <= 0) {
			int err;
			const char *msg = gzerror(gz, &err);
			if (got < 0 || (err != Z_OK && err != Z_STREAM_END))
				die(path, "read error in %s: %s", what, zmsg(path, msg));
			die(path, "truncated in %s", what);
		}
		p += got;
		n -= (size_t)got;
	}
}

static void expect_end(gzFile gz, const char *path)
{
	unsigned char extra;
	int got = gzread(gz, &extra, 1);
	if (got > 0)
		die(path, "trailing data after the last item");
	if (got < 0) {
		int err;
		die(path, "read error at end: %s", zmsg(path, gzerror(gz, &err)));
	}
}

static uint32_t be32(const unsigned char *b)
{
	return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

static gzFile open_idx(const char *path, uint32_t magic, uint32_t *dims, int ndims)
{
	unsigned char hdr[16];
	gzFile gz = gzopen(path, "rb");
	if (!gz)
		die(path, "cannot open: %s", errno ? strerror(errno) : "out of memory");
	read_exact(gz, path, hdr, 4 + 4 * (size_t)ndims, "the idx header");
	if (be32(hdr) != magic)
		die(path, "bad idx magic 0x%08x (expected 0x%08x)", be32(hdr), magic);
	for (int i = 0; i < ndims; i++)
		dims[i] = be32(hdr + 4 + 4 * i);
	if (dims[0] == 0 || dims[0] > MAX_ITEMS)
		die(path, "item count %u out of range 1..%u", dims[0], MAX_ITEMS);
	return gz;
}

/* Folder name for class k: its index (zero-padded so that sorted order is label order,
 * which is how qforge numbers class folders) and the display name with '/' and spaces
 * turned into '_', other punctuation dropped: "T-shirt/top" -> "0_tshirt_top". */
static void folder_name(char *out, size_t outsz, unsigned k, unsigned nclasses, const char *name)
{
	int width = nclasses > 100 ? 3 : nclasses > 10 ? 2 : 1;
	size_t n = (size_t)snprintf(out, outsz, "%0*u", width, k);
	int pending_sep = 1;
	for (const char *c = name; *c && n + 2 < outsz; c++) {
		unsigned char ch = (unsigned char)*c;
		if ((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9')) {
			if (pending_sep)
				out[n++] = '_';
			out[n++] = (char)ch;
			pending_sep = 0;
		} else if (ch >= 'A' && ch <= 'Z') {
			if (pending_sep)
				out[n++] = '_';
			out[n++] = (char)(ch - 'A' + 'a');
			pending_sep = 0;
		} else if (ch == ' ' || ch == '/' || ch == '_' || ch == '\t') {
			pending_sep = 1;
		}
	}
	out[n] = '\0';
}

/* One display name per non-empty line; returns the count. */
static unsigned read_classes(const char *path, char names[][MAX_NAME + 1])
{
	char line[MAX_NAME + 2];
	unsigned n = 0, lineno = 0;
	FILE *f = fopen(path, "r");
	if (!f)
		die(path, "cannot open: %s", strerror(errno));
	while (fgets(line, sizeof line, f)) {
		size_t len = strlen(line);
		lineno++;
		if (len == sizeof line - 1 && line[len - 1] != '\n')
			die(path, "line %u longer than %u characters", lineno, MAX_NAME);
		while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r' ||
				   line[len - 1] == ' ' || line[len - 1] == '\t'))
			line[--len] = '\0';
		if (len == 0)
			continue;
		if (n == MAX_CLASSES)
			die(path, "more than %u classes", MAX_CLASSES);
		memcpy(names[n++], line, len + 1);
	}
	if (ferror(f))
		die(path, "read error");
	fclose(f);
	if (n == 0)
		die(path, "no class names");
	return n;
}

static void make_dir(const char *path)
{
	struct stat st;
	if (mkdir(path, 0777) != 0 && errno != EEXIST)
		die(path, "cannot create directory: %s", strerror(errno));
	if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
		die(path, "exists and is not a directory");
}

struct png_err {
	jmp_buf jmp;
	char msg[256];
};

static void on_png_error(png_structp png, png_const_charp msg)
{
	struct png_err *e = png_get_error_ptr(png);
	snprintf(e->msg, sizeof e->msg, "%s", msg);
	longjmp(e->jmp, 1);
}

static void on_png_warning(png_structp png, png_const_charp msg)
{
	(void)png;
	(void)msg;
}

/* Writes pix, (rows,cols) 8-bit gray, to tmp and renames it to path, so that an
 * interrupted run never leaves a truncated PNG under its final name. */
static void write_png(const char *path, const char *tmp, const unsigned char *pix,
		      uint32_t rows, uint32_t cols)
{
	struct png_err err = { .msg = "" };
	png_structp png = NULL;
	png_infop info = NULL;
	FILE *f = fopen(tmp, "wb");
	if (!f)
		die(tmp, "cannot create: %s", strerror(errno));
	png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &err, on_png_error, on_png_warning);
	if (png)
		info = png_create_info_struct(png);
	if (!png || !info) {
		fclose(f);
		remove(tmp);
		die(tmp, "out of memory in libpng");
	}
	if (setjmp(err.jmp)) {
		png_destroy_write_struct(&png, &info);
		fclose(f);
		remove(tmp);
		die(tmp, "libpng: %s", err.msg);
	}
	png_init_io(png, f);
	png_set_IHDR(png, info, cols, rows, 8, PNG_COLOR_TYPE_GRAY, PNG_INTERLACE_NONE,
		     PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
	png_write_info(png, info);
	for (uint32_t r = 0; r < rows; r++) // pix is (rows,cols)
		png_write_row(png, pix + (size_t)r * cols);
	png_write_end(png, info);
	png_destroy_write_struct(&png, &info);
	if (fflush(f) != 0 || ferror(f)) {
		int e = errno;
		fclose(f);
		remove(tmp);
		die(tmp, "write error: %s", strerror(e));
	}
	if (fclose(f) != 0) {
		remove(tmp);
		die(tmp, "write error: %s", strerror(errno));
	}
	if (rename(tmp, path) != 0) {
		int e = errno;
		remove(tmp);
		die(path, "cannot rename from %s: %s", tmp, strerror(e));
	}
}

static void usage(void)
{
	fprintf(stderr,
		"usage: idx2png [-c CLASSES.txt] IMAGES-idx3-ubyte.gz LABELS-idx1-ubyte.gz OUTDIR\n"
		"Writes OUTDIR/<k>_<class>/<index>.png (8-bit gray); class names come from\n"
		"CLASSES.txt (one per line, in label order) or default to Fashion-MNIST's.\n");
	exit(2);
}

int main(int argc, char **argv)
{
	static char names[MAX_CLASSES][MAX_NAME + 1];
	static char folders[MAX_CLASSES][MAX_NAME + 8];
	const char *classes_path = NULL;
	int a = 1;
	unsigned nclasses;

	if (a + 1 < argc && strcmp(argv[a], "-c") == 0) {
		classes_path = argv[a + 1];
		a += 2;
	}
	if (argc - a != 3 || argv[a][0] == '-')
		usage();
	const char *img_path = argv[a], *lbl_path = argv[a + 1], *outdir = argv[a + 2];

	if (classes_path) {
		nclasses = read_classes(classes_path, names);
	} else {
		nclasses = sizeof builtin_classes / sizeof builtin_classes[0];
		for (unsigned k = 0; k < nclasses; k++)
			snprintf(names[k], sizeof names[k], "%s", builtin_classes[k]);
	}
	for (unsigned k = 0; k < nclasses; k++)
		folder_name(folders[k], sizeof folders[k], k, nclasses, names[k]);

	// Labels first: they are small, and a bad label must fail before any PNG is written.
	uint32_t ldims[1], idims[3];
	gzFile lgz = open_idx(lbl_path, IDX1_MAGIC, ldims, 1);
	gzFile igz = open_idx(img_path, IDX3_MAGIC, idims, 3);
	const uint32_t count = ldims[0], rows = idims[1], cols = idims[2];
	if (idims[0] != count)
		die(img_path, "%u images but %s has %u labels", idims[0], lbl_path, count);
	if (rows == 0 || rows > MAX_SIDE || cols == 0 || cols > MAX_SIDE)
		die(img_path, "image size %ux%u out of range 1..%u", rows, cols, MAX_SIDE);
	unsigned char *labels = malloc(count);
	unsigned char *pix = malloc((size_t)rows * cols);
	if (!labels || !pix)
		die(lbl_path, "out of memory for %u labels", count);
	read_exact(lgz, lbl_path, labels, count, "the labels");
	expect_end(lgz, lbl_path);
	gzclose(lgz);
	for (uint32_t i = 0; i < count; i++)
		if (labels[i] >= nclasses)
			die(lbl_path, "label %u of item %u is not below the %u classes",
			    labels[i], i, nclasses);

	// A whole pass over the images first, so that a truncated or corrupt file fails
	// before any PNG is written, not after thousands of them.
	for (uint32_t i = 0; i < count; i++)
		read_exact(igz, img_path, pix, (size_t)rows * cols, "the images");
	expect_end(igz, img_path);
	gzclose(igz);
	igz = open_idx(img_path, IDX3_MAGIC, idims, 3);
	if (idims[0] != count || idims[1] != rows || idims[2] != cols)
		die(img_path, "changed while being read");

	// Every class gets its folder, even an empty one, so folder positions stay labels.
	char path[PATH_MAX], tmp[PATH_MAX];
	make_dir(outdir);
	for (unsigned k = 0; k < nclasses; k++) {
		if ((size_t)snprintf(path, sizeof path, "%s/%s", outdir, folders[k]) >= sizeof path)
			die(outdir, "path too long");
		make_dir(path);
	}

	// Zero-padded to the width of the largest index, so names sort in index order.
	int width = 5;
	for (uint32_t m = count - 1; m >= 100000; m /= 10)
		width++;
	for (uint32_t i = 0; i < count; i++) {
		read_exact(igz, img_path, pix, (size_t)rows * cols, "the images");
		if ((size_t)snprintf(path, sizeof path, "%s/%s/%0*u.png", outdir,
				     folders[labels[i]], width, i) >= sizeof path ||
		    (size_t)snprintf(tmp, sizeof tmp, "%s.tmp", path) >= sizeof tmp)
			die(outdir, "path too long");
		write_png(path, tmp, pix, rows, cols);
	}
	gzclose(igz);
	free(pix);
	free(labels);
	printf("idx2png: wrote %u %ux%u images in %u class folders under %s\n", count, rows,
	       cols, nclasses, outdir);
	return 0;
}
