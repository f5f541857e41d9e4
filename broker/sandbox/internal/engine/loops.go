package engine

import "github.com/dop251/goja/ast"

// Loop rewrites: goja runs `for (init; test; update) body` as the test, a
// conditional jump out, the body, the update and a jump back, plus a
// placeholder jump per iteration where a loop declared with let or const
// would copy its bindings for closures. The validator, which already
// instruments every loop body with a step, rewrites loops where it cannot
// change what the plan observes:
//
//	for (let i = 0; i < n; i++) body   ->   { let i = 0; if (i < n) do { step; body; i++ } while (i < n) }
//	while (test) body                  ->   if (test) do { step; body } while (test)
//
// The do-while checks its test at its end and jumps back in one
// instruction, so each iteration runs two instructions fewer (one for a
// while loop). The steps are unchanged: one at the start of each iteration.
//
// Conditions, each for a reason:
//   - A let or const declaration moves out of the for head only when no
//     function, arrow or class is written anywhere in the loop: only a
//     closure can tell one binding per iteration from one per loop.
//   - A for loop becomes a do-while only when its body has no continue
//     statement (a continue in a do-while goes to the test and would skip
//     the update); a while loop's continue goes to its test either way.
//   - The test is written twice (before the loop and at its end) only when it
//     is made of names, literals, operators, member accesses, calls and
//     assignments (duplicable): it is evaluated exactly as often as before
//     (once before the first iteration, once after each), and none of these
//     has an identity per place in the source (a tagged template or a
//     function literal would).
//   - Labels stay on the loop (the do-while or the for), so break and
//     continue with a label go where they went.

// loopRewrite is a loop statement the validator rewrote: block replaces
// loop where loop was written, and slot is where the loop now is in block
// (where labels of the loop go).
type loopRewrite struct {
	loop  ast.Statement
	block ast.Statement
	slot  *ast.Statement
}

// rewriteFor rewrites a for loop whose body is instrumented already.
// noClosures and noContinue say whether the loop (head and body) has no
// function, arrow or class, and the body no continue statement.
func (v *validator) rewriteFor(s *ast.ForStatement, noClosures, noContinue bool) {
	if v.fail != nil {
		return
	}
	var head ast.Statement
	switch in := s.Initializer.(type) {
	case *ast.ForLoopInitializerLexicalDecl:
		if !noClosures {
			return
		}
		head = &in.LexicalDeclaration
	case *ast.ForLoopInitializerVarDeclList:
		head = &ast.VariableStatement{Var: s.For, List: in.List}
	case *ast.ForLoopInitializerExpression:
		head = &ast.ExpressionStatement{Expression: in.Expression}
	}
	body, ok := s.Body.(*ast.BlockStatement)
	rotate := ok && noContinue && s.Test != nil && duplicable(s.Test)
	_, lexical := s.Initializer.(*ast.ForLoopInitializerLexicalDecl)
	if !rotate && !lexical {
		return
	}
	block := &ast.BlockStatement{LeftBrace: s.For, RightBrace: s.Body.Idx1() - 1}
	if head != nil {
		block.List = append(block.List, head)
	}
	if rotate {
		if s.Update != nil {
			body.List = append(body.List, &ast.ExpressionStatement{Expression: s.Update})
		}
		loop := &ast.IfStatement{If: s.For, Test: s.Test, Consequent: &ast.DoWhileStatement{
			Do: s.For, Test: s.Test, Body: body, RightParenthesis: body.RightBrace,
		}}
		block.List = append(block.List, loop)
		v.rewritten = &loopRewrite{loop: s, block: block, slot: &loop.Consequent}
		return
	}
	s.Initializer = nil
	block.List = append(block.List, s)
	v.rewritten = &loopRewrite{loop: s, block: block, slot: &block.List[len(block.List)-1]}
}

// rewriteWhile rewrites a while loop whose body is instrumented already.
func (v *validator) rewriteWhile(s *ast.WhileStatement) {
	if v.fail != nil || !duplicable(s.Test) {
		return
	}
	loop := &ast.IfStatement{If: s.While, Test: s.Test, Consequent: &ast.DoWhileStatement{
		Do: s.While, Test: s.Test, Body: s.Body, RightParenthesis: s.Body.Idx1() - 1,
	}}
	v.rewritten = &loopRewrite{loop: s, block: loop, slot: &loop.Consequent}
}

// duplicable reports a loop test that may be written twice: names,
// literals, operators, member accesses, calls and assignments to names or
// members. It runs after the validator walked e (so e's depth is bounded).
func duplicable(e ast.Expression) bool {
	switch e := e.(type) {
	case *ast.Identifier, *ast.NumberLiteral, *ast.StringLiteral, *ast.BooleanLiteral,
		*ast.NullLiteral, *ast.ThisExpression:
		return true
	case *ast.BinaryExpression:
		return duplicable(e.Left) && duplicable(e.Right)
	case *ast.UnaryExpression:
		return duplicable(e.Operand)
	case *ast.DotExpression:
		return duplicable(e.Left)
	case *ast.BracketExpression:
		return duplicable(e.Left) && duplicable(e.Member)
	case *ast.ConditionalExpression:
		return duplicable(e.Test) && duplicable(e.Consequent) && duplicable(e.Alternate)
	case *ast.AssignExpression:
		switch e.Left.(type) {
		case *ast.Identifier, *ast.DotExpression, *ast.BracketExpression:
			return duplicable(e.Left) && duplicable(e.Right)
		}
		return false
	case *ast.CallExpression:
		if !duplicable(e.Callee) {
			return false
		}
		for _, a := range e.ArgumentList {
			if !duplicable(a) {
				return false
			}
		}
		return true
	case *ast.SequenceExpression:
		for _, x := range e.Sequence {
			if !duplicable(x) {
				return false
			}
		}
		return true
	}
	return false
}
