package engine

import (
	"math/big"
	"reflect"

	"github.com/dop251/goja"
)

// jsonCount is the state of one serialization by the prelude's serialize
// (see internal/prelude): goja's native JSON.stringify walks the value and calls
// the counter, a native replacer, with every value it is about to write.
// The counter keeps an estimate of the output and the path from the root,
// and stops the walk when the estimate passes the limit, the path passes
// MaxJSONDepth, or (strict) a value JSON cannot hold appears. It is the
// prelude's former JavaScript replacer moved to Go: same estimates, same
// order of checks, no JavaScript call and no closure per value or per
// serialization.
//
// Serializations nest (a getter or toJSON may serialize something else),
// so the states form a stack; jsonText pushes one before it calls
// JSON.stringify and pops it after.
type jsonCount struct {
	size, limit int64
	strict      bool
	calls       int
	holders     []*goja.Object // the path from the root to the value being written
	// fail is why the walk was stopped: "L" too large, "D" too deep,
	// "B<key>" a BigInt, "S<key>" a Symbol (strict); "" when it was not
	// stopped by the counter.
	fail string
}

var (
	typeBigInt = reflect.TypeOf((*big.Int)(nil))
	typeString = reflect.TypeOf("")
	typeBool   = reflect.TypeOf(true)
	typeInt    = reflect.TypeOf(int64(0))
	typeFloat  = reflect.TypeOf(float64(0))
)

// jsonCountStopEvery is how many values the counter writes between two looks
// at whether the run was stopped: the native walk runs no JavaScript, so
// the interrupt that ends a run at its limits is not seen inside it.
const jsonCountStopEvery = 256

// jsonTextFunc is the prelude's nat.text(value, space, limit, strict):
// the intrinsic JSON.stringify of value with the counter as replacer,
// between the push and the pop of its state, in one native call (the
// prelude's begin, end and their try-finally were three calls more per
// serialization, a tool call's input included). A throw of the walk
// (the counter's stop, a toJSON's or getter's exception, an interrupt) is
// rethrown as it came, after the pop; jsonFailure then says why the
// counter stopped it. stringify and the counter are taken before the
// prelude runs: the runtime's own, whatever a script does to JSON.
func (x *execution) jsonTextFunc() func(goja.FunctionCall) goja.Value {
	stringify, _ := goja.AssertFunction(x.rt.Get("JSON").ToObject(x.rt).Get("stringify"))
	counter := x.rt.ToValue(x.jsonCounter)
	return func(call goja.FunctionCall) goja.Value {
		x.jsonBegin(call.Argument(2).ToInteger(), call.Argument(3).ToBoolean())
		v, err := stringify(goja.Undefined(), call.Argument(0), counter, call.Argument(1))
		x.jsonEnd()
		if err != nil {
			panic(err)
		}
		return v
	}
}

// jsonBegin pushes a serialization's state.
func (x *execution) jsonBegin(limit int64, strict bool) {
	n := len(x.counts)
	if n < cap(x.counts) {
		x.counts = x.counts[:n+1]
	} else {
		x.counts = append(x.counts, jsonCount{})
	}
	c := &x.counts[n]
	c.size, c.calls, c.fail = 0, 0, ""
	c.limit = limit
	c.strict = strict
	c.holders = c.holders[:0]
}

// jsonFailure reports why the last serialization that ended was stopped
// ("" when the counter did not stop it): nat.countFailure().
func (x *execution) jsonFailure(goja.FunctionCall) goja.Value {
	return x.rt.ToValue(x.countFail)
}

// jsonEnd pops the innermost serialization's state, keeping why the
// counter stopped it (jsonFailure).
func (x *execution) jsonEnd() {
	if n := len(x.counts); n > 0 {
		c := &x.counts[n-1]
		x.countFail = c.fail
		clear(c.holders) // nothing of the value stays reachable from here
		c.holders = c.holders[:0]
		x.counts = x.counts[:n-1]
	}
}

// jsonCounter is the replacer: (key, value) with this the holder; it
// returns the value to write.
func (x *execution) jsonCounter(call goja.FunctionCall) goja.Value {
	if len(x.counts) == 0 {
		// Not inside serialize: the counter is never handed to the plan.
		panic(x.rt.NewTypeError("internal error: JSON counter used outside serialization"))
	}
	c := &x.counts[len(x.counts)-1]
	key, v := call.Argument(0), call.Argument(1)
	c.calls++
	if c.calls%jsonCountStopEvery == 0 {
		select {
		case <-x.stopCh:
			// The run is over; any exception ends the walk and the
			// interrupt takes over at the next instruction.
			panic(goja.Undefined())
		default:
		}
	}
	holder, _ := call.This.(*goja.Object)
	for n := len(c.holders); n > 0 && c.holders[n-1] != holder; n-- {
		c.holders = c.holders[:n-1]
	}
	var size int64
	switch t := v.(type) {
	case *goja.Object:
		if _, isFn := goja.AssertFunction(t); isFn {
			size = 4 // as undefined
			break
		}
		if len(c.holders) >= MaxJSONDepth {
			c.stop("D")
		}
		c.holders = append(c.holders, t)
		size = 2
	case *goja.Symbol:
		if c.strict {
			c.stop("S" + key.String())
		}
		v, size = goja.Undefined(), 4
	case goja.String:
		size = int64(t.Length()) + 2
	default:
		switch v.ExportType() {
		case nil:
			// null, or undefined: written as null in an array (a sparse
			// array of 2^32-1 holes is 4 bytes each) and omitted in an
			// object; counted as null either way.
			size = 4
		case typeInt, typeFloat:
			size = 8
		case typeBool:
			size = 5
		case typeBigInt:
			if c.strict {
				c.stop("B" + key.String())
			}
		case typeString:
			size = int64(len(v.String())) + 2
		}
	}
	if ks, ok := key.(goja.String); ok {
		size += int64(ks.Length())
	}
	c.size += size + 3
	if c.size > c.limit {
		c.stop("L")
	}
	return v
}

// stop ends the walk; the prelude turns c.fail into the error the script
// sees.
func (c *jsonCount) stop(why string) {
	c.fail = why
	panic(goja.Undefined())
}
