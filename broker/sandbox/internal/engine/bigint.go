package engine

import (
	"fmt"
	"math"
	"math/big"
	"reflect"

	"github.com/dop251/goja"
	"github.com/dop251/goja/ast"
	"github.com/dop251/goja/file"
	"github.com/dop251/goja/token"
	"github.com/dop251/goja/unistring"
)

// BigInt operators that size their result by an operand.
//
// `1n << 8000000000n` allocates a gigabyte in one instruction and
// `7n ** 200000000n` computes for many seconds in one: operators, not
// built-ins, so no prelude wrapper sees them, and goja's interrupt waits
// for the instruction to end. A worker's RLIMIT_DATA and watchdog stop
// them; in-process they would outgrow the gateway. A plan can make a
// BigInt only with a BigInt literal or the name BigInt (tool results,
// JSON and the request context hold none), which the validator sees: for
// such plans (the globalBigInt bit) it rewrites
//
//	a ** b   into   __cm$obj.big(a, b, 0) ** __cm$obj.last()
//	a << b   into   __cm$obj.big(a, b, 1) << __cm$obj.last()
//
// in place (the left operand is evaluated before the right one, so last
// returns the b that big just checked, and each operand is evaluated once),
// and `x **= b`, `x <<= b` into `x **= __cm$obj.bigAmount(x, b, 0)` when x
// is a name (read twice, which has no side effect in strict code without
// `with`), `__cm$obj.bigAmount(undefined, b, 0)` otherwise (the amount alone
// is checked). The configuration gives such plans these native checks on
// the spread check's function object, out of the plan's reach (reserved
// name), and BigInt.asUintN/asIntN with their bit count checked. A result
// over maxBigIntBits ends the run like the step limit. Other plans pay
// nothing.

// maxBigIntBits bounds the result of a BigInt shift or power and the bit
// count of asUintN/asIntN: 128 KiB, about 315,000 decimal digits. A power
// is one instruction the time limit cannot interrupt, and its work grows
// faster than its size (math/big squares by Karatsuba, about three times
// the time per doubling): the largest one allowed takes about 20 ms under
// -race, where one of 2^24 bits took seconds (docs/sandbox.md).
const maxBigIntBits = 1 << 20

var bigIntType = reflect.TypeOf((*big.Int)(nil))

const (
	bigOpPow = iota
	bigOpShift
)

// bigOps collects the operators the validator may rewrite (see above).
type bigOps struct {
	binary  []*ast.BinaryExpression
	assigns []*ast.AssignExpression
}

func (b *bigOps) note(e ast.Expression) {
	switch e := e.(type) {
	case *ast.BinaryExpression:
		if e.Operator == token.EXPONENT || e.Operator == token.SHIFT_LEFT {
			b.binary = append(b.binary, e)
		}
	case *ast.AssignExpression:
		if e.Operator == token.EXPONENT || e.Operator == token.SHIFT_LEFT {
			b.assigns = append(b.assigns, e)
		}
	}
}

// rewrite routes the collected operators through the checks.
func (b *bigOps) rewrite() {
	for _, e := range b.binary {
		idx := e.Idx0()
		e.Left = bigCall(idx, "big", e.Left, e.Right, bigOpNumber(e.Operator, idx))
		e.Right = bigCall(idx, "last")
	}
	for _, e := range b.assigns {
		idx := e.Idx0()
		var base ast.Expression = &ast.UnaryExpression{Operator: token.VOID, Idx: idx, Operand: &ast.NumberLiteral{Idx: idx, Literal: "0", Value: int64(0)}}
		if id, ok := e.Left.(*ast.Identifier); ok {
			base = &ast.Identifier{Name: id.Name, Idx: id.Idx}
		}
		e.Right = bigCall(idx, "bigAmount", base, e.Right, bigOpNumber(e.Operator, idx))
	}
}

func bigOpNumber(op token.Token, idx file.Idx) ast.Expression {
	n := bigOpPow
	if op == token.SHIFT_LEFT {
		n = bigOpShift
	}
	return &ast.NumberLiteral{Idx: idx, Literal: fmt.Sprint(n), Value: int64(n)}
}

// bigCall builds `__cm$obj.<method>(args...)` positioned at idx.
func bigCall(idx file.Idx, method string, args ...ast.Expression) ast.Expression {
	return &ast.CallExpression{
		Callee: &ast.DotExpression{
			Left:       &ast.Identifier{Name: unistring.String(spreadName), Idx: idx},
			Identifier: ast.Identifier{Name: unistring.String(method), Idx: idx},
		},
		ArgumentList:     args,
		LeftParenthesis:  idx,
		RightParenthesis: idx,
	}
}

// bigTooLarge ends the run: a BigInt result past maxBigIntBits.
func (x *execution) bigTooLarge(what string) {
	x.interrupt(runtimeResult("RangeError", fmt.Sprintf("%s exceeds the sandbox limit of %d bits", what, maxBigIntBits), ""))
}

// bigCheck reports whether a op b stays within maxBigIntBits when both
// are BigInts (anything else is left to the operator); when not, it ends
// the run.
func (x *execution) bigCheck(a, b goja.Value, op int64) bool {
	if b == nil || b.ExportType() != bigIntType {
		return true
	}
	n := b.Export().(*big.Int)
	if n.Sign() <= 0 {
		return true // a right shift, 1, or the operator's own RangeError
	}
	if op == bigOpShift {
		if !n.IsInt64() || n.Int64() > maxBigIntBits {
			x.bigTooLarge("BigInt shift by " + n.String())
			return false
		}
		return true
	}
	if a == nil || a.ExportType() != bigIntType {
		if !n.IsInt64() || n.Int64() > maxBigIntBits {
			x.bigTooLarge("BigInt exponent " + n.String())
			return false
		}
		return true
	}
	base := a.Export().(*big.Int)
	if base.BitLen() <= 1 {
		return true // 0, 1 or -1 to any power
	}
	if !n.IsInt64() || n.Int64() > maxBigIntBits {
		// a ** n has at least (bits(a) - 1) * n + 1 bits for |a| >= 2.
		at := new(big.Int).Mul(big.NewInt(int64(base.BitLen()-1)), n)
		x.bigTooLarge("BigInt power of at least " + at.String() + " bits")
		return false
	}
	// The result's size itself, floor(n * log2|a|) + 1 bits, not a lower
	// bound: 3n ** n has 1.58 * n bits where (bits(a) - 1) * n says n.
	if bits := powBits(base, n.Int64()); bits > maxBigIntBits {
		x.bigTooLarge(fmt.Sprintf("BigInt power of %d bits", bits))
		return false
	}
	return true
}

// powBits is the bit length of a ** n for |a| >= 2 and 0 < n <=
// maxBigIntBits, from log2|a| in float64: exact when |a| is a power of
// two, otherwise within a bit.
func powBits(a *big.Int, n int64) int64 {
	shift := max(a.BitLen()-64, 0)
	top := new(big.Int).Rsh(new(big.Int).Abs(a), uint(shift))
	f, _ := new(big.Float).SetInt(top).Float64()
	return int64(float64(n)*(math.Log2(f)+float64(shift))) + 1
}

// prepareBigInt gives a plan that can make BigInts the checks the
// validator's rewrite calls, on the spread check's function object, and
// BigInt.asUintN/asIntN with their bit count checked.
func (x *execution) prepareBigInt(objSource goja.Value) {
	rt := x.rt
	o, ok := objSource.(*goja.Object)
	if !ok {
		return
	}
	var right goja.Value
	_ = o.Set("big", func(call goja.FunctionCall) goja.Value {
		a, b := call.Argument(0), call.Argument(1)
		if !x.bigCheck(a, b, call.Argument(2).ToInteger()) {
			right = goja.Undefined()
			return goja.Undefined()
		}
		right = b
		return a
	})
	_ = o.Set("last", func(goja.FunctionCall) goja.Value {
		v := right
		right = nil
		if v == nil {
			return goja.Undefined()
		}
		return v
	})
	_ = o.Set("bigAmount", func(call goja.FunctionCall) goja.Value {
		a, b := call.Argument(0), call.Argument(1)
		if goja.IsUndefined(a) {
			a = nil
		}
		if !x.bigCheck(a, b, call.Argument(2).ToInteger()) {
			return goja.Undefined()
		}
		return b
	})
	bigC, ok := rt.Get("BigInt").(*goja.Object)
	if !ok {
		return
	}
	for _, name := range []string{"asUintN", "asIntN"} {
		orig, ok := goja.AssertFunction(bigC.Get(name))
		if !ok {
			continue
		}
		name := name
		_ = bigC.DefineDataProperty(name, rt.ToValue(func(call goja.FunctionCall) goja.Value {
			// The bit count is converted once and the built-in gets the
			// number (a valueOf answering twice cannot pass a small one).
			bits := call.Argument(0).ToNumber()
			if f := bits.ToFloat(); f > maxBigIntBits {
				x.bigTooLarge(fmt.Sprintf("BigInt.%s of %.0f bits", name, f))
				return goja.Undefined()
			}
			v, err := orig(call.This, bits, call.Argument(1))
			if err != nil {
				panic(err)
			}
			return v
		}), goja.FLAG_TRUE, goja.FLAG_FALSE, goja.FLAG_TRUE)
	}
}
