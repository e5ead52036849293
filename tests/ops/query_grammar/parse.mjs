// Parses TraceQL and LogQL with Grafana's own Lezer grammars (the ones Grafana's query editors use)
// and reports, from the parse tree, the error nodes and the names each query uses.
//
// stdin:  [{"id": "...", "lang": "traceql" | "logql", "query": "..."}, ...]
// stdout: {"versions": {package: version}, "results": [{"id", "lang", "ok", "errors", ...}]}
//
// Test-only (tests/ops/test_query_grammar.py runs it); no network, no files written.
import { readFileSync } from 'node:fs';
import { parser as traceql } from '@grafana/lezer-traceql';
import { parser as logql } from '@grafana/lezer-logql';

function version(pkg) {
  // The packages' "exports" hide their package.json from import/require: read the installed copy.
  return JSON.parse(readFileSync(new URL(`./node_modules/${pkg}/package.json`, import.meta.url), 'utf8')).version;
}

function text(q, n) {
  return q.slice(n.from, n.to);
}

// Go-style string literals: "..." (escapes as in JSON for what queries use) or `raw`.
function unquote(s) {
  if (s.startsWith('`') && s.endsWith('`')) return s.slice(1, -1);
  if (s.startsWith('"') && s.endsWith('"')) {
    try {
      return JSON.parse(s);
    } catch {
      return s.slice(1, -1);
    }
  }
  return s;
}

function children(node) {
  const out = [];
  for (let c = node.firstChild; c; c = c.nextSibling) out.push(c);
  return out;
}

function ancestor(node, names) {
  for (let p = node.parent; p; p = p.parent) if (names.includes(p.name)) return p;
  return null;
}

function errors(tree, q) {
  const out = [];
  tree.iterate({
    enter(n) {
      if (n.type.isError) {
        out.push({ from: n.from, to: n.to, near: q.slice(Math.max(0, n.from - 20), n.to + 20) });
      }
    },
  });
  return out;
}

// Every node called `name` in a tree or under (and including) a syntax node, in document order.
function nodesNamed(root, name) {
  const out = [];
  const walk = (n) => {
    if (n.name === name) out.push(n);
    for (let c = n.firstChild; c; c = c.nextSibling) walk(c);
  };
  walk(root.topNode ?? root);
  return out;
}

// ---------------------------------------------------------------- TraceQL

const SCOPES = { Span: 'span', Resource: 'resource', Event: 'event', Link: 'link', Instrumentation: 'instrumentation' };
const TRACEQL_CONTEXTS = [
  'SpansetFilter',
  'SelectOperation',
  'GroupOperation',
  'CoalesceOperation',
  'MetricsOperation',
];

function traceqlField(node, q) {
  if (node.name === 'IntrinsicField') return { kind: 'intrinsic', scope: '', parent: false, name: text(q, node) };
  // AttributeField: [Parent] [Span|Resource|Event|Link|Instrumentation] Identifier; unscoped is ".name"
  let scope = '';
  let parent = false;
  let name = null;
  for (const c of children(node)) {
    if (c.name === 'Parent') parent = true;
    else if (c.name in SCOPES) scope = SCOPES[c.name];
    else if (c.name === 'Identifier') name = unquote(text(q, c));
  }
  return { kind: 'attribute', scope, parent, name };
}

function fieldOf(expr) {
  // A FieldExpression that is just a field: its only child is the AttributeField/IntrinsicField.
  const cs = children(expr);
  if (expr.name === 'FieldExpression' && cs.length === 1 && ['AttributeField', 'IntrinsicField'].includes(cs[0].name)) {
    return cs[0];
  }
  return null;
}

function staticOf(expr) {
  const cs = children(expr);
  if (expr.name === 'FieldExpression' && cs.length === 1 && cs[0].name === 'Static') {
    const v = cs[0].firstChild;
    return v ? v : cs[0];
  }
  return null;
}

function parseTraceql(q) {
  const tree = traceql.parse(q);
  const fields = [];
  for (const name of ['AttributeField', 'IntrinsicField']) {
    for (const n of nodesNamed(tree, name)) {
      const ctx = ancestor(n, TRACEQL_CONTEXTS);
      fields.push({ ...traceqlField(n, q), text: text(q, n), from: n.from, in: ctx ? ctx.name : 'other' });
    }
  }
  fields.sort((a, b) => a.from - b.from);
  const filters = nodesNamed(tree, 'SpansetFilter').map((f) => {
    const comparisons = [];
    const or = nodesNamed(f, 'Or').length > 0;
    for (const e of nodesNamed(f, 'FieldExpression')) {
      // FieldExpression(field) FieldOp FieldExpression(static), in either order
      const cs = children(e);
      if (cs.length !== 3 || cs[1].name !== 'FieldOp') continue;
      let field = fieldOf(cs[0]);
      let value = staticOf(cs[2]);
      if (!field || !value) {
        field = fieldOf(cs[2]);
        value = staticOf(cs[0]);
      }
      if (!field || !value) continue;
      const vtext = text(q, value);
      comparisons.push({
        field: traceqlField(field, q),
        op: text(q, cs[1]),
        value: { type: value.name, text: vtext, value: value.name === 'String' ? unquote(vtext) : vtext },
      });
    }
    return { text: text(q, f), or, comparisons };
  });
  return { tree, fields, filters };
}

// ---------------------------------------------------------------- LogQL

// Stages after which a label filter may name a label the stage itself made.
const LABEL_MAKERS = [
  'LabelParser',
  'JsonExpressionParser',
  'LogfmtParser',
  'LogfmtExpressionParser',
  'LabelFormatExpr',
  'Unpack',
  'Pattern',
  'Regexp',
];
const MATCHER_OPS = { Eq: '=', Neq: '!=', Re: '=~', Nre: '!~' };

function parseLogql(q) {
  const tree = logql.parse(q);
  const makers = [];
  for (const name of LABEL_MAKERS) for (const n of nodesNamed(tree, name)) makers.push(n.from);
  const matchers = nodesNamed(tree, 'Matcher').map((m) => {
    let label = null;
    let op = null;
    let value = null;
    for (const c of children(m)) {
      if (c.name === 'Identifier') label = text(q, c);
      else if (c.name in MATCHER_OPS) op = MATCHER_OPS[c.name];
      else if (c.name === 'String') value = unquote(text(q, c));
    }
    const ctx = ancestor(m, ['Selector', 'LabelFilter']);
    return {
      label,
      op,
      value,
      in: ctx ? ctx.name : 'other',
      after_label_maker: makers.some((p) => p < m.from),
      text: text(q, m),
    };
  });
  const labels = [];
  for (const n of nodesNamed(tree, 'Identifier')) {
    if (ancestor(n, ['Matcher'])) continue; // reported with its matcher
    const ctx = ancestor(n, [
      'Grouping',
      'LabelFormatExpr',
      'LabelsFormatExpr',
      'DropLabelsExpr',
      'KeepLabelsExpr',
      'UnwrapExpr',
    ]);
    const where = ctx ? ctx.name : n.parent.name;
    // A grouping wraps its pipeline: it may name a label any stage of it made.
    const made = where === 'Grouping' ? makers.length > 0 : makers.some((p) => p < n.from);
    labels.push({ name: text(q, n), in: where, after_label_maker: made });
  }
  // The pipeline's stages, in order: a query is "simple" (its result can be decided from the
  // labels of each record alone) when it is a log query whose stages are single-matcher label filters.
  const stages = nodesNamed(tree, 'PipelineStage').map((s) => {
    const kinds = children(s).filter((c) => c.name !== 'Pipe');
    const kind = kinds.length ? kinds[0].name : '';
    const single = kind === 'LabelFilter' && children(kinds[0]).length === 1 && kinds[0].firstChild.name === 'Matcher';
    return { kind, single_matcher: single, text: text(q, s) };
  });
  const top = tree.topNode.firstChild?.firstChild?.name ?? '';
  return { tree, matchers, labels, stages, kind: top };
}

// ---------------------------------------------------------------- main

const input = JSON.parse(readFileSync(0, 'utf8'));
const results = input.map(({ id, lang, query }) => {
  if (lang === 'traceql') {
    const { tree, fields, filters } = parseTraceql(query);
    const errs = errors(tree, query);
    return { id, lang, ok: errs.length === 0, errors: errs, tree: tree.toString(), fields, filters };
  }
  if (lang === 'logql') {
    const { tree, matchers, labels, stages, kind } = parseLogql(query);
    const errs = errors(tree, query);
    return { id, lang, ok: errs.length === 0, errors: errs, tree: tree.toString(), kind, matchers, labels, stages };
  }
  return { id, lang, ok: false, errors: [{ from: 0, to: 0, near: `unknown language ${lang}` }] };
});
const versions = {};
for (const pkg of ['@grafana/lezer-traceql', '@grafana/lezer-logql', '@lezer/lr', '@lezer/common'])
  versions[pkg] = version(pkg);
process.stdout.write(JSON.stringify({ versions, results }));
