//go:build !linux

package engine

import (
	"bufio"
	"io"
	"os"
)

// rawReader, rawWriter and pollablePipe leave the pipes as they are (see
// the Linux version).
func rawReader(r io.Reader) io.Reader  { return r }
func rawWriter(w io.Writer) io.Writer  { return w }
func pollablePipe(f *os.File) *os.File { return f }

// workerInput is Linux's (see worker_input_linux.go): elsewhere a worker's
// serve loop reads every frame, and scripts wait for results asleep.
type workerInput struct{}

func newWorkerInput(io.Reader, *bufio.Reader, int, func(*wireMsg) error) *workerInput { return nil }
func (*workerInput) run() error                                                       { return nil }
func (*workerInput) poll()                                                            {}
func (*workerInput) giveBack()                                                        {}
