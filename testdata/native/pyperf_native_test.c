/*
 * A small C extension for the --native end-to-end tests (tests/native.rs builds it for each interpreter with
 * -O2 -fomit-frame-pointer: no frame pointers, as the interpreters people run have none). Its functions have
 * names the tests look for and call each other without inlining or tail calls, so the expected stack is exact:
 *
 *   call_through(cb) -> pyperf_outer -> pyperf_inner -> cb() (Python) ... spin(n) -> pyperf_leaf_spin
 *   deep(n, spin) -> pyperf_deep x (n + 1) -> pyperf_leaf_spin
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static volatile unsigned long pyperf_sink;

__attribute__((noinline)) static unsigned long pyperf_leaf_spin(unsigned long n)
{
	unsigned long x = 1;

	for (unsigned long i = 0; i < n; i++) {
		x = x * 6364136223846793005UL + i;
		__asm__ volatile("" : "+r"(x));
	}
	return x;
}

/* n C frames deep, then the spin: the benchmark's native part (bench/native.py). */
__attribute__((noinline)) static unsigned long pyperf_deep(unsigned long n, unsigned long spin)
{
	unsigned long r;

	if (n == 0)
		return pyperf_leaf_spin(spin);
	r = pyperf_deep(n - 1, spin);
	__asm__ volatile("" : "+r"(r));
	return r + 1;
}

/* Calls back into Python. */
__attribute__((noinline)) static PyObject *pyperf_inner(PyObject *callback)
{
	PyObject *r = PyObject_CallObject(callback, NULL);

	__asm__ volatile("");
	return r;
}

__attribute__((noinline)) static PyObject *pyperf_outer(PyObject *callback)
{
	PyObject *r = pyperf_inner(callback);

	__asm__ volatile("");
	return r;
}

static PyObject *pyperf_call_through(PyObject *self, PyObject *callback)
{
	PyObject *r = pyperf_outer(callback);

	__asm__ volatile("");
	return r;
}

static PyObject *pyperf_spin(PyObject *self, PyObject *arg)
{
	unsigned long n = PyLong_AsUnsignedLong(arg);

	if (PyErr_Occurred())
		return NULL;
	pyperf_sink = pyperf_leaf_spin(n);
	Py_RETURN_NONE;
}

static PyObject *pyperf_deep_call(PyObject *self, PyObject *args)
{
	unsigned long n, spin;

	if (!PyArg_ParseTuple(args, "kk", &n, &spin))
		return NULL;
	pyperf_sink = pyperf_deep(n, spin);
	Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
	{"deep", pyperf_deep_call, METH_VARARGS, "deep(n, spin): n C frames deep, then spin iterations."},
	{"call_through", pyperf_call_through, METH_O, "Call a callable from C, through two C functions."},
	{"spin", pyperf_spin, METH_O, "Spin n iterations in C."},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "pyperf_native_test", NULL, -1, methods};

PyMODINIT_FUNC PyInit_pyperf_native_test(void)
{
	return PyModule_Create(&module);
}
